//! A console's colour palette, learned from frames rendered both as palette indices and as
//! RGB, so that later frames need only their indices.
//!
//! An emulator that renders one byte of palette index per pixel (ALE's `getScreen`, 1.8
//! us for a 210 x 160 Atari frame in ale-py 0.11) gives the RGB frame (`getScreenRGB`,
//! 21.8 us) as that palette applied to the indices. [`LearnedPalette`] keeps the colour of
//! every index seen so far: [`LearnedPalette::expand`] writes the RGB frame of indices
//! that are all known, the same bytes the emulator would have written, and a frame with
//! an index not yet seen is read in RGB once and [`LearnedPalette::learn`]ed from. A
//! frame that contradicts what was learned (an index shown in two colours) retires the
//! palette for good: every later frame is read in RGB.

/// Marks an index whose colour is not known yet (never set in a learned entry, whose
/// colour fills the low 24 bits).
const UNKNOWN: u32 = 1 << 24;

/// The colours of the palette indices seen so far (see the module's documentation).
#[derive(Clone, Debug)]
pub struct LearnedPalette {
    /// `r | g << 8 | b << 16` per index, or [`UNKNOWN`].
    colours: [u32; 256],
    /// Whether a frame contradicted the palette.
    retired: bool,
}

impl Default for LearnedPalette {
    fn default() -> Self {
        Self::new()
    }
}

impl LearnedPalette {
    /// A palette that knows no colour yet.
    pub const fn new() -> Self {
        Self {
            colours: [UNKNOWN; 256],
            retired: false,
        }
    }

    /// Whether [`LearnedPalette::expand`] may still succeed (no frame contradicted the
    /// palette).
    pub const fn usable(&self) -> bool {
        !self.retired
    }

    /// Writes the RGB frame of `indices` into `rgb` (three bytes a pixel, `rgb.len() ==
    /// 3 * indices.len()`) and returns true when every index's colour is known and the
    /// palette is usable; returns false otherwise, `rgb` then partly written.
    ///
    /// # Panics
    /// If `rgb` is not three bytes per index.
    pub fn expand(&self, indices: &[u8], rgb: &mut [u8]) -> bool {
        assert_eq!(rgb.len(), 3 * indices.len(), "three RGB bytes per index");
        if self.retired {
            return false;
        }
        let colour = |i: u8| self.colours[usize::from(i)];
        let mut seen = 0;
        // Four pixels as three little-endian words.
        let (quads, rest) = indices.split_at(indices.len() - indices.len() % 4);
        for (px, dst) in quads.chunks_exact(4).zip(rgb.chunks_exact_mut(12)) {
            let [a, b, c, d] = [px[0], px[1], px[2], px[3]].map(colour);
            seen |= a | b | c | d;
            let words = [a | b << 24, b >> 8 | c << 16, c >> 16 | d << 8];
            for (dst, word) in dst.chunks_exact_mut(4).zip(words) {
                dst.copy_from_slice(&word.to_le_bytes());
            }
        }
        for (&i, dst) in rest.iter().zip(rgb[3 * quads.len()..].chunks_exact_mut(3)) {
            let c = colour(i);
            seen |= c;
            dst.copy_from_slice(&c.to_le_bytes()[..3]);
        }
        seen & UNKNOWN == 0
    }

    /// Learns the colours of a frame rendered both ways (`rgb` three bytes per index).
    /// Returns false, and retires the palette, if the frame shows an index in a colour
    /// other than the one learned for it.
    ///
    /// # Panics
    /// If `rgb` is not three bytes per index.
    pub fn learn(&mut self, indices: &[u8], rgb: &[u8]) -> bool {
        assert_eq!(rgb.len(), 3 * indices.len(), "three RGB bytes per index");
        for (&i, px) in indices.iter().zip(rgb.chunks_exact(3)) {
            let c = u32::from_le_bytes([px[0], px[1], px[2], 0]);
            let entry = &mut self.colours[usize::from(i)];
            if *entry != UNKNOWN && *entry != c {
                self.retired = true;
                return false;
            }
            *entry = c;
        }
        true
    }
}

#[cfg(test)]
mod tests;
