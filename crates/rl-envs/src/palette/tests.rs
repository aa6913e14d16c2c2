use proptest::prelude::*;

use super::LearnedPalette;

/// The RGB frame of `indices` under `colours`.
fn render(colours: &[[u8; 3]; 256], indices: &[u8]) -> Vec<u8> {
    indices
        .iter()
        .flat_map(|&i| colours[usize::from(i)])
        .collect()
}

fn colours() -> impl Strategy<Value = [[u8; 3]; 256]> {
    prop::collection::vec(any::<[u8; 3]>(), 256).prop_map(|v| std::array::from_fn(|i| v[i]))
}

proptest! {
    /// Once every index of a frame was learned, `expand` writes exactly the emulator's
    /// RGB frame (any length: the four-pixel words and the tail); before, it refuses.
    #[test]
    fn expands_learned_frames_to_the_same_bytes(
        colours in colours(),
        seen in prop::collection::vec(any::<u8>(), 0..300),
        frame in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut palette = LearnedPalette::new();
        let mut out = vec![0xAB; 3 * frame.len()];
        let all_known = frame.is_empty();
        prop_assert_eq!(palette.expand(&frame, &mut out), all_known);
        prop_assert!(palette.learn(&seen, &render(&colours, &seen)));
        let known = frame.iter().all(|i| seen.contains(i));
        let expanded = palette.expand(&frame, &mut out);
        prop_assert_eq!(expanded, known);
        if known {
            prop_assert_eq!(&out, &render(&colours, &frame));
        }
        prop_assert!(palette.learn(&frame, &render(&colours, &frame)));
        out.fill(0);
        prop_assert!(palette.expand(&frame, &mut out));
        prop_assert_eq!(out, render(&colours, &frame));
    }

    /// A frame showing a learned index in another colour retires the palette: every
    /// later `expand` refuses, even of frames it knew.
    #[test]
    fn a_contradiction_retires_the_palette(
        colours in colours(),
        index in any::<u8>(),
        flip in 1u8..=255,
        channel in 0usize..3,
    ) {
        let mut palette = LearnedPalette::new();
        let frame = [index, index.wrapping_add(1), index];
        prop_assert!(palette.learn(&frame, &render(&colours, &frame)));
        let mut other = colours;
        other[usize::from(index)][channel] ^= flip;
        prop_assert!(!palette.learn(&[index], &render(&other, &[index])));
        prop_assert!(!palette.usable());
        let mut out = [0; 9];
        prop_assert!(!palette.expand(&frame, &mut out));
    }
}

#[test]
fn black_is_a_colour_like_any_other() {
    // Index 0 in black (all zero bytes) is known once learned, not mistaken for unknown.
    let mut palette = LearnedPalette::new();
    let mut out = [1; 12];
    assert!(!palette.expand(&[0; 4], &mut out));
    assert!(palette.learn(&[0], &[0, 0, 0]));
    assert!(palette.expand(&[0; 4], &mut out));
    assert_eq!(out, [0; 12]);
}
