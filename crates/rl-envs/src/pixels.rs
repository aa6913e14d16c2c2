//! Atari-style frame preprocessing without OpenCV: grayscale, the max of two frames,
//! area resizing and a frame stack, as the pure functions and buffers
//! [`AtariPreprocess`](crate::AtariPreprocess) is made of.
//!
//! The arithmetic reproduces OpenCV's code bit for bit, as
//! Stable-Baselines3's `WarpFrame` and Gymnasium's `AtariPreprocessing` call them:
//! [`rgb_to_gray`] is `cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)` and [`AreaResize`] is
//! `cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)` for a one-channel `u8`
//! image. Each function says which rounding it reproduces; `tests/opencv.rs` compares
//! them with OpenCV 5.0.0 (4.14.0 gives the same bytes) pixel for pixel.

use rl_core::env::check_len;
use rl_core::simd::Isa;
use rl_core::{Error, Result};

mod simd;

/// Bits of the fixed-point luma weights of OpenCV's 8-bit `RGB2GRAY` (`gray_shift`).
const GRAY_SHIFT: u32 = 15;
/// BT.601 weights 0.299, 0.587, 0.114 in units of 2^-15, rounded to nearest as OpenCV
/// does (`RY15 = 9798`, `GY15 = 19235`, `BY15 = 3735`; they sum to 2^15, so grays stay
/// exactly gray and white stays 255).
const GRAY_WEIGHTS: [u32; 3] = [9798, 19235, 3735];

/// Converts an interleaved RGB image (`[h, w, 3]`, row-major) to grayscale (`[h, w]`) with
/// the ITU-R BT.601 luma weights, bit for bit as OpenCV's `cvtColor(RGB2GRAY)` does for
/// `u8`: `gray = (9798 r + 19235 g + 3735 b + 2^14) >> 15`, fixed point with the weights
/// rounded to 15 bits and the result rounded half up. Checked against
/// opencv-python-headless 4.14.0 and 5.0.0, IPP on and off (`tests/opencv.rs`). Older OpenCV releases
/// used 14-bit weights (4899, 9617, 1868), which differ by one level on about 0.25% of
/// pixels; Gymnasium's `AtariPreprocessing` reads gray screens from ALE's palette
/// instead, which differ too.
///
/// # Errors
/// [`Error::ShapeMismatch`] unless `rgb.len() == 3 * gray.len()`.
///
/// ```
/// let mut gray = [0u8; 2];
/// rl_envs::rgb_to_gray(&[255, 0, 0, 10, 20, 30], &mut gray)?;
/// assert_eq!(gray, [76, 18]);
/// # Ok::<(), rl_core::Error>(())
/// ```
pub fn rgb_to_gray(rgb: &[u8], gray: &mut [u8]) -> Result<()> {
    check_len("rgb image", 3 * gray.len(), rgb.len())?;
    gray_on(Isa::detect(), rgb, gray);
    Ok(())
}

/// [`rgb_to_gray`] on `isa`'s instructions (the same bytes on each); lengths checked.
fn gray_on(isa: Isa, rgb: &[u8], gray: &mut [u8]) {
    let done = simd::gray(isa, rgb, gray);
    let [wr, wg, wb] = GRAY_WEIGHTS;
    for (g, p) in gray[done..].iter_mut().zip(rgb[3 * done..].chunks_exact(3)) {
        let sum = wr * u32::from(p[0]) + wg * u32::from(p[1]) + wb * u32::from(p[2]);
        // At most 255 * 2^15 + 2^14 before the shift: the result fits a u8.
        *g = ((sum + (1 << (GRAY_SHIFT - 1))) >> GRAY_SHIFT) as u8;
    }
}

/// Writes the elementwise maximum of two frames into `out`, as Stable-Baselines3's
/// `MaxAndSkipEnv` does over the last two raw frames of a skip (it removes the flicker of
/// Atari sprites drawn every other frame).
///
/// # Errors
/// [`Error::ShapeMismatch`] unless the three slices have the same length.
pub fn max_frames(a: &[u8], b: &[u8], out: &mut [u8]) -> Result<()> {
    check_len("second frame", a.len(), b.len())?;
    check_len("max-pooled frame", a.len(), out.len())?;
    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
        *o = x.max(y);
    }
    Ok(())
}

/// Area-averaging downscale of a one-channel `u8` image, OpenCV's `INTER_AREA`, with its
/// tables computed once so that [`AreaResize::resize`] allocates nothing.
///
/// OpenCV (and so this type) takes one of two paths, chosen as `cv::resize` chooses with
/// `scale = 1 / (dst / src)` per axis in `f64`:
///
/// - **Whole factors** (both scales within `f64::EPSILON` of integers `sx`, `sy`, e.g.
///   168 × 168 to 84 × 84): each output is the mean of its `sy × sx` block. For 2 × 2
///   blocks the integer sum is rounded half up, `(sum + 2) >> 2`; for other blocks the
///   mean is `sum as f32 * (1 / area) as f32` rounded half to even (`cvRound`).
/// - **Any other factors** (210 × 160 to 84 × 84 is 2.5 × 1.905): each output is the
///   mean over its rectangle of the source, pixels cut by the rectangle's edges weighted
///   by the fraction inside (`computeResizeAreaTab`: edge fractions under 1e-3 are
///   dropped, weights are `f64` fractions of the cell size rounded to `f32`). Sums run
///   in `f32` in OpenCV's order (each source row's horizontal sums, then rows weighted
///   and added); the result is rounded half to even and clamped to 0..=255.
///
/// Enlarging is refused: OpenCV's `INTER_AREA` falls back to bilinear interpolation
/// there, which this type does not implement.
///
/// ```
/// use rl_envs::AreaResize;
///
/// let mut resize = AreaResize::new([210, 160], [84, 84])?;
/// let frame = vec![90u8; 210 * 160];
/// let mut small = vec![0u8; 84 * 84];
/// resize.resize(&frame, &mut small)?;
/// assert!(small.iter().all(|&p| p == 90));
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct AreaResize {
    src: [usize; 2],
    dst: [usize; 2],
    method: Method,
}

/// How an [`AreaResize`] computes its output.
#[derive(Clone, Debug)]
enum Method {
    /// Whole factors of 2 in both axes: `(sum + 2) >> 2`.
    Halve,
    /// Other whole factors: `cvRound(sum * (1 / area))`.
    Blocks {
        rows: usize,
        columns: usize,
        inverse_area: f32,
    },
    /// Fractional factors: weighted taps per axis, `f32` scratch rows.
    Taps {
        columns: Box<Horizontal>,
        rows: Vec<Tap>,
        row_sums: Vec<f32>,
        sums: Vec<f32>,
    },
}

/// One source pixel's weight in one output pixel (OpenCV's `DecimateAlpha`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Tap {
    src: usize,
    dst: usize,
    weight: f32,
}

impl AreaResize {
    /// A resize from `src = [height, width]` to `dst = [height, width]`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a zero dimension or a `dst` larger than `src` in
    /// either axis.
    pub fn new(src: [usize; 2], dst: [usize; 2]) -> Result<Self> {
        Self::new_on(Isa::detect(), src, dst)
    }

    /// [`AreaResize::new`] whose horizontal taps run on `isa`'s instructions (the same
    /// bytes on each).
    fn new_on(isa: Isa, src: [usize; 2], dst: [usize; 2]) -> Result<Self> {
        if src.contains(&0) || dst.contains(&0) {
            return Err(Error::config(
                "area resize",
                format!(
                    "from {src:?} to {dst:?} has a zero dimension: images need at least 1 × 1 pixels"
                ),
            ));
        }
        if dst[0] > src[0] || dst[1] > src[1] {
            return Err(Error::config(
                "area resize",
                format!(
                    "from {src:?} to {dst:?} enlarges the image: area interpolation only \
                     shrinks (OpenCV enlarges bilinearly there); give a smaller or equal size"
                ),
            ));
        }
        // As cv::resize: inverse scales first, then their inverses.
        let scale = |axis: usize| 1.0 / (dst[axis] as f64 / src[axis] as f64);
        let (scale_y, scale_x) = (scale(0), scale(1));
        let whole = |s: f64| {
            let rounded = s.round_ties_even();
            ((s - rounded).abs() < f64::EPSILON).then_some(rounded as usize)
        };
        let method = match (whole(scale_y), whole(scale_x)) {
            (Some(2), Some(2)) => Method::Halve,
            (Some(rows), Some(columns)) => Method::Blocks {
                rows,
                columns,
                inverse_area: 1.0 / (rows * columns) as f32,
            },
            _ => Method::Taps {
                columns: Box::new(Horizontal::new(
                    isa,
                    &area_taps(src[1], dst[1], scale_x),
                    src[1],
                    dst[1],
                )),
                rows: area_taps(src[0], dst[0], scale_y),
                row_sums: vec![0.0; dst[1]],
                sums: vec![0.0; dst[1]],
            },
        };
        Ok(Self { src, dst, method })
    }

    /// The input size, `[height, width]`.
    pub fn src_shape(&self) -> [usize; 2] {
        self.src
    }

    /// The output size, `[height, width]`.
    pub fn dst_shape(&self) -> [usize; 2] {
        self.dst
    }

    /// Resizes `src` (row-major, `src_shape` pixels) into `dst` (`dst_shape` pixels).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a wrong-length slice; nothing is written then.
    pub fn resize(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let [src_h, src_w] = self.src;
        let [dst_h, dst_w] = self.dst;
        check_len("image to resize", src_h * src_w, src.len())?;
        check_len("resized image", dst_h * dst_w, dst.len())?;
        match &mut self.method {
            Method::Halve => {
                for (y, out) in dst.chunks_exact_mut(dst_w).enumerate() {
                    let top = &src[2 * y * src_w..][..src_w];
                    let bottom = &src[(2 * y + 1) * src_w..][..src_w];
                    for (x, o) in out.iter_mut().enumerate() {
                        let sum = u32::from(top[2 * x])
                            + u32::from(top[2 * x + 1])
                            + u32::from(bottom[2 * x])
                            + u32::from(bottom[2 * x + 1]);
                        *o = ((sum + 2) >> 2) as u8;
                    }
                }
            }
            Method::Blocks {
                rows,
                columns,
                inverse_area,
            } => {
                let (rows, columns) = (*rows, *columns);
                for (y, out) in dst.chunks_exact_mut(dst_w).enumerate() {
                    for (x, o) in out.iter_mut().enumerate() {
                        let mut sum = 0u32;
                        for line in src[y * rows * src_w..].chunks_exact(src_w).take(rows) {
                            sum += line[x * columns..][..columns]
                                .iter()
                                .map(|&p| u32::from(p))
                                .sum::<u32>();
                        }
                        *o = saturate(sum as f32 * *inverse_area);
                    }
                }
            }
            Method::Taps {
                columns,
                rows,
                row_sums,
                sums,
            } => {
                sums.fill(0.0);
                let mut current = rows.first().map_or(0, |t| t.dst);
                let mut summed = None;
                for row in rows.iter() {
                    // A source row cut by a cell's edge is the last tap of one output row
                    // and the first of the next: its sums are made once.
                    if summed != Some(row.src) {
                        let line = &src[row.src * src_w..][..src_w];
                        columns.sum_line(line, row_sums);
                        summed = Some(row.src);
                    }
                    if row.dst != current {
                        let out = &mut dst[current * dst_w..][..dst_w];
                        for ((o, s), &r) in out.iter_mut().zip(sums.iter_mut()).zip(&*row_sums) {
                            *o = saturate(*s);
                            *s = row.weight * r;
                        }
                        current = row.dst;
                    } else {
                        for (s, &r) in sums.iter_mut().zip(&*row_sums) {
                            *s += row.weight * r;
                        }
                    }
                }
                let out = &mut dst[current * dst_w..][..dst_w];
                for (o, &s) in out.iter_mut().zip(&*sums) {
                    *o = saturate(s);
                }
            }
        }
        Ok(())
    }
}

/// The horizontal taps laid out for a branch-free pass: every output column's taps are
/// consecutive source pixels, so each column keeps its first pixel and `k` weights (the
/// most any column has; zeros after its own), read from the line converted to `f32`
/// once, with `k` zeros past its end.
#[derive(Clone, Debug)]
struct Horizontal {
    first: Vec<usize>,
    weights: Vec<f32>,
    k: usize,
    line: Vec<f32>,
    /// The same taps for the AVX2 loop (it sums the whole chunks where it runs).
    gather: simd::GatherTaps,
}

impl Horizontal {
    /// From `taps` sorted by output column (each column's taps consecutive pixels).
    fn new(isa: Isa, taps: &[Tap], src_len: usize, dst_len: usize) -> Self {
        let mut counts = vec![0usize; dst_len];
        for tap in taps {
            counts[tap.dst] += 1;
        }
        let k = counts.iter().copied().max().unwrap_or(0).max(1);
        let mut first = vec![0usize; dst_len];
        let mut weights = vec![0.0f32; dst_len * k];
        let mut seen = vec![0usize; dst_len];
        for tap in taps {
            if seen[tap.dst] == 0 {
                first[tap.dst] = tap.src;
            }
            debug_assert_eq!(
                first[tap.dst] + seen[tap.dst],
                tap.src,
                "consecutive pixels"
            );
            weights[tap.dst * k + seen[tap.dst]] = tap.weight;
            seen[tap.dst] += 1;
        }
        let gather = simd::GatherTaps::new(isa, &first, &weights, k);
        let line = vec![0.0; (src_len + k).max(gather.reach())];
        Self {
            first,
            weights,
            k,
            line,
            gather,
        }
    }

    /// One source line into `row_sums`: each output's taps summed in order from 0, as
    /// `row_sums[d] += v * w` over the taps would (a zero weight past a column's own taps
    /// adds `+0.0` to a sum of non-negative terms: the same bits).
    fn sum_line(&mut self, line: &[u8], row_sums: &mut [f32]) {
        for (x, &p) in self.line.iter_mut().zip(line) {
            *x = f32::from(p);
        }
        let (k, line) = (self.k, &self.line);
        let done = self.gather.sum(line, row_sums);
        // Eight columns at a time: eight independent running sums, so the additions of
        // one column do not wait on the other's (each column's own order is unchanged).
        let mut outputs = row_sums[done..].chunks_exact_mut(LANES);
        let mut firsts = self.first[done..].chunks_exact(LANES);
        let mut weights = self.weights[done * k..].chunks_exact(LANES * k);
        for ((out, first), weights) in (&mut outputs).zip(&mut firsts).zip(&mut weights) {
            let mut sums = [0.0f32; LANES];
            for j in 0..k {
                for (lane, sum) in sums.iter_mut().enumerate() {
                    *sum += line[first[lane] + j] * weights[lane * k + j];
                }
            }
            out.copy_from_slice(&sums);
        }
        let rest = outputs.into_remainder();
        let (first, weights) = (firsts.remainder(), weights.remainder());
        for ((out, &first), weights) in rest.iter_mut().zip(first).zip(weights.chunks_exact(k)) {
            let mut sum = 0.0f32;
            for (&v, &w) in line[first..first + k].iter().zip(weights) {
                sum += v * w;
            }
            *out = sum;
        }
    }
}

/// Output columns [`Horizontal::sum_line`] sums side by side.
const LANES: usize = 8;

/// OpenCV's `saturate_cast<uchar>(float)`: round half to even, then clamp. Clamped
/// first (rounding keeps the integers 0 and 255 where they are, so the order does not
/// matter), then rounded by adding and taking away 1.5 x 2^23, which leaves no fraction
/// bits and rounds half to even in the default rounding mode: without the libm call
/// `round_ties_even` is on x86-64's baseline (no SSE4.1), one per output pixel.
#[inline]
fn saturate(value: f32) -> u8 {
    const ROUND: f32 = 12_582_912.0;
    ((value.clamp(0.0, 255.0) + ROUND) - ROUND) as u8
}

/// The weighted taps of one axis, OpenCV's `computeResizeAreaTab` for one channel: output
/// cell `d` covers `[d * scale, (d + 1) * scale)` of the source, clipped to it.
fn area_taps(src_len: usize, dst_len: usize, scale: f64) -> Vec<Tap> {
    let mut taps = Vec::with_capacity(2 * src_len);
    let last = src_len as i64 - 1;
    for d in 0..dst_len {
        let start = d as f64 * scale;
        let end = start + scale;
        let cell = scale.min(src_len as f64 - start);
        let end_index = (end.floor() as i64).min(last);
        let start_index = (start.ceil() as i64).min(end_index);
        // The cell's first pixel, partly inside.
        if start_index as f64 - start > 1e-3 {
            taps.push(Tap {
                src: (start_index - 1) as usize,
                dst: d,
                weight: ((start_index as f64 - start) / cell) as f32,
            });
        }
        for s in start_index..end_index {
            taps.push(Tap {
                src: s as usize,
                dst: d,
                weight: (1.0 / cell) as f32,
            });
        }
        // The cell's last pixel, partly inside.
        if end - end_index as f64 > 1e-3 {
            taps.push(Tap {
                src: end_index as usize,
                dst: d,
                weight: ((end - end_index as f64).min(1.0).min(cell) / cell) as f32,
            });
        }
    }
    taps
}

/// Downscales with [`AreaResize`], building its tables for this one call (so it
/// allocates; keep an [`AreaResize`] to resize many frames).
///
/// # Errors
/// As [`AreaResize::new`] and [`AreaResize::resize`].
pub fn resize_area(
    src: &[u8],
    src_shape: [usize; 2],
    dst: &mut [u8],
    dst_shape: [usize; 2],
) -> Result<()> {
    AreaResize::new(src_shape, dst_shape)?.resize(src, dst)
}

/// What fills a [`FrameStack`] behind the first frame of an episode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StackPadding {
    /// Copies of the first frame (Gymnasium's `FrameStackObservation` default).
    #[default]
    Repeat,
    /// Black frames (Stable-Baselines3's `VecFrameStack`).
    Zeros,
}

/// The last `depth` frames of `frame_len` pixels, kept in a ring so that each new frame
/// is written once, and assembled oldest first (channels first: `[depth, h, w]`) into the
/// caller's buffer by [`FrameStack::write_stacked`].
///
/// ```
/// use rl_envs::{FrameStack, StackPadding};
///
/// let mut stack = FrameStack::new(3, 2)?;
/// stack.push(&[1, 1])?;
/// stack.pad(StackPadding::Zeros);
/// stack.push(&[2, 2])?;
/// let mut obs = [9u8; 6];
/// stack.write_stacked(&mut obs)?;
/// assert_eq!(obs, [0, 0, 1, 1, 2, 2]);
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameStack {
    frames: Vec<u8>,
    frame_len: usize,
    depth: usize,
    /// Ring slot of the newest frame.
    newest: usize,
}

impl FrameStack {
    /// A stack of `depth` black frames of `frame_len` pixels.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `depth` or `frame_len` is zero.
    pub fn new(depth: usize, frame_len: usize) -> Result<Self> {
        if depth == 0 || frame_len == 0 {
            return Err(Error::config(
                "frame stack",
                format!(
                    "of {depth} frames of {frame_len} pixels is empty: stack at least one frame of one pixel"
                ),
            ));
        }
        Ok(Self {
            frames: vec![0; depth * frame_len],
            frame_len,
            depth,
            newest: depth - 1,
        })
    }

    /// Frames in the stack.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Pixels per frame.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Pixels of the stacked observation, `depth * frame_len`.
    pub fn stacked_len(&self) -> usize {
        self.frames.len()
    }

    /// Adds `frame` as the newest, dropping the oldest.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless `frame.len() == frame_len`; nothing changes then.
    pub fn push(&mut self, frame: &[u8]) -> Result<()> {
        check_len("frame", self.frame_len, frame.len())?;
        self.push_with(|slot| slot.copy_from_slice(frame));
        Ok(())
    }

    /// Drops the oldest frame and lets `fill` write the newest in place (the slot holds
    /// the dropped frame's pixels until then), returning what `fill` returns.
    pub fn push_with<R>(&mut self, fill: impl FnOnce(&mut [u8]) -> R) -> R {
        self.newest = (self.newest + 1) % self.depth;
        fill(&mut self.frames[self.newest * self.frame_len..][..self.frame_len])
    }

    /// Replaces every frame but the newest with `padding`: what a stack holds right after
    /// an episode's first frame.
    pub fn pad(&mut self, padding: StackPadding) {
        let len = self.frame_len;
        let (newest, depth) = (self.newest, self.depth);
        for age in 1..depth {
            let slot = (newest + depth - age) % depth;
            match padding {
                StackPadding::Zeros => self.frames[slot * len..][..len].fill(0),
                StackPadding::Repeat => self
                    .frames
                    .copy_within(newest * len..(newest + 1) * len, slot * len),
            }
        }
    }

    /// The frame pushed `age` pushes ago (0: the newest).
    ///
    /// # Panics
    /// If `age >= depth`.
    pub fn frame(&self, age: usize) -> &[u8] {
        assert!(
            age < self.depth,
            "frame age {age} in a stack of {}",
            self.depth
        );
        let slot = (self.newest + self.depth - age) % self.depth;
        &self.frames[slot * self.frame_len..][..self.frame_len]
    }

    /// Writes the frames oldest first into `out` (`[depth, frame]`, channels first).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] unless `out.len() == stacked_len()`.
    pub fn write_stacked(&self, out: &mut [u8]) -> Result<()> {
        check_len("stacked observation buffer", self.frames.len(), out.len())?;
        // Oldest first: the ring from the slot after the newest, then from its start.
        let split = (self.newest + 1) * self.frame_len;
        let (head, tail) = self.frames.split_at(split);
        out[..tail.len()].copy_from_slice(tail);
        out[tail.len()..].copy_from_slice(head);
        Ok(())
    }

    /// The ring as stored and the newest slot, for saving a wrapper's state.
    pub(crate) fn as_ring(&self) -> (&[u8], usize) {
        (&self.frames, self.newest)
    }

    /// Restores what [`FrameStack::as_ring`] gave, if it fits this stack.
    pub(crate) fn set_ring(&mut self, frames: &[u8], newest: usize) -> bool {
        if frames.len() != self.frames.len() || newest >= self.depth {
            return false;
        }
        self.frames.copy_from_slice(frames);
        self.newest = newest;
        true
    }
}

#[cfg(test)]
mod tests;
