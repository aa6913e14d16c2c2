use std::collections::VecDeque;

use proptest::prelude::*;

use super::*;

#[test]
fn gray_matches_hand_computed_fixed_point_values() {
    let rgb = [
        255, 0, 0, // (255 * 9798 + 16384) >> 15 = 76
        0, 255, 0, // (255 * 19235 + 16384) >> 15 = 150
        0, 0, 255, // (255 * 3735 + 16384) >> 15 = 29
        10, 20, 30, // (97980 + 384700 + 112050 + 16384) >> 15 = 18
        // (921012 + 115410 + 552780 + 16384) >> 15 = 48, where OpenCV's old 14-bit
        // weights gave 49 (802864 >> 14): OpenCV 5.0 gives 48.
        94, 6, 148, //
        255, 255, 255, 0, 0, 0,
    ];
    let mut gray = [0u8; 7];
    rgb_to_gray(&rgb, &mut gray).unwrap();
    assert_eq!(gray, [76, 150, 29, 18, 48, 255, 0]);
    assert!(rgb_to_gray(&rgb, &mut [0u8; 5]).is_err());
}

#[test]
fn area_resize_matches_hand_computed_fractional_weights() {
    // 5 -> 2 pixels is a factor 2.5: weights 0.4, 0.4, 0.2 | 0.2, 0.4, 0.4.
    let mut small = [0u8; 2];
    resize_area(&[10, 20, 30, 40, 50], [1, 5], &mut small, [1, 2]).unwrap();
    assert_eq!(small, [18, 42]);
    resize_area(&[0, 0, 255, 0, 0], [1, 5], &mut small, [1, 2]).unwrap();
    assert_eq!(small, [51, 51]);
    // The same in both axes: a lone centre pixel weighs 0.2 * 0.2 in every output.
    let mut image = [0u8; 25];
    image[12] = 100;
    let mut out = [0u8; 4];
    resize_area(&image, [5, 5], &mut out, [2, 2]).unwrap();
    assert_eq!(out, [4; 4]);
    // Rows 0..3 weigh 0.4, 0.4, 0.2 in output row 0, and 0.2, 0.4, 0.4 in row 1.
    let rows: Vec<u8> = (0..5u8).flat_map(|r| [r * 50; 3]).collect();
    let mut out = [0u8; 2];
    resize_area(&rows, [5, 3], &mut out, [2, 1]).unwrap();
    // 0.4 * 0 + 0.4 * 50 + 0.2 * 100 = 40; 0.2 * 100 + 0.4 * 150 + 0.4 * 200 = 160.
    assert_eq!(out, [40, 160]);
}

#[test]
fn whole_factor_blocks_round_as_opencv_does() {
    // 2 x 2 blocks: integer (sum + 2) >> 2, half up.
    let mut out = [0u8; 1];
    resize_area(&[1, 1, 0, 0], [2, 2], &mut out, [1, 1]).unwrap();
    assert_eq!(out, [1]);
    resize_area(&[1, 0, 0, 0], [2, 2], &mut out, [1, 1]).unwrap();
    assert_eq!(out, [0]);
    // Other blocks: sum * 0.25 rounded half to even.
    for (row, want) in [
        ([1, 1, 0, 0], 0),
        ([3, 3, 0, 0], 2),
        ([5, 5, 0, 0], 2),
        ([1, 1, 1, 0], 1),
    ] {
        resize_area(&row, [1, 4], &mut out, [1, 1]).unwrap();
        assert_eq!(out, [want], "{row:?}");
    }
    // Same size: the identity.
    let image: Vec<u8> = (0..=255).collect();
    let mut same = vec![0u8; 256];
    resize_area(&image, [16, 16], &mut same, [16, 16]).unwrap();
    assert_eq!(same, image);
}

#[test]
fn bad_resizes_are_refused() {
    assert!(AreaResize::new([84, 84], [168, 84]).is_err());
    assert!(AreaResize::new([84, 84], [84, 85]).is_err());
    assert!(AreaResize::new([0, 84], [1, 1]).is_err());
    assert!(AreaResize::new([84, 84], [0, 1]).is_err());
    let mut resize = AreaResize::new([210, 160], [84, 84]).unwrap();
    assert_eq!(
        (resize.src_shape(), resize.dst_shape()),
        ([210, 160], [84, 84])
    );
    let mut out = vec![7u8; 84 * 84];
    assert!(resize.resize(&[0; 210 * 159], &mut out).is_err());
    assert!(resize.resize(&[0; 210 * 160], &mut out[1..]).is_err());
    assert!(out.iter().all(|&p| p == 7), "nothing written on error");
}

#[test]
fn the_atari_resize_uses_fractional_taps_that_cover_each_cell() {
    let resize = AreaResize::new([210, 160], [84, 84]).unwrap();
    let Method::Taps { columns, rows, .. } = &resize.method else {
        panic!("210 x 160 to 84 x 84 is not a whole factor")
    };
    for cell in 0..84 {
        let total: f32 = rows
            .iter()
            .filter(|t| t.dst == cell)
            .map(|t| t.weight)
            .sum();
        assert!((total - 1.0).abs() < 1e-5, "row cell {cell} weighs {total}");
        let total: f32 = columns.weights[cell * columns.k..][..columns.k]
            .iter()
            .sum();
        assert!(
            (total - 1.0).abs() < 1e-5,
            "column cell {cell} weighs {total}"
        );
    }
    // Each column reads at most 3 pixels (a scale of 160 / 84 = 1.9).
    assert_eq!(columns.k, 3);
}

/// The instruction sets this CPU runs.
fn isas() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|isa| isa.is_supported())
        .collect()
}

/// The exact area mean of `image` over each output cell, in `f64`.
fn exact_area_mean(image: &[u8], src: [usize; 2], dst: [usize; 2]) -> Vec<f64> {
    let overlap = |d: usize, s: usize, axis: usize| {
        let scale = src[axis] as f64 / dst[axis] as f64;
        let (a, b) = (d as f64 * scale, (d + 1) as f64 * scale);
        (b.min(s as f64 + 1.0) - a.max(s as f64)).max(0.0) / scale
    };
    let mut out = vec![0.0; dst[0] * dst[1]];
    for (i, o) in out.iter_mut().enumerate() {
        let (dy, dx) = (i / dst[1], i % dst[1]);
        for sy in 0..src[0] {
            let wy = overlap(dy, sy, 0);
            if wy > 0.0 {
                for sx in 0..src[1] {
                    *o += wy * overlap(dx, sx, 1) * f64::from(image[sy * src[1] + sx]);
                }
            }
        }
    }
    out
}

fn image_and_sizes() -> impl Strategy<Value = (Vec<u8>, [usize; 2], [usize; 2])> {
    (1usize..40, 1usize..40).prop_flat_map(|(h, w)| {
        (
            proptest::collection::vec(any::<u8>(), h * w),
            Just([h, w]),
            (1..=h, 1..=w).prop_map(|(a, b)| [a, b]),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Fixed point stays within rounding of the real-valued BT.601 luma, and grays are
    /// kept exactly.
    #[test]
    fn gray_is_the_rounded_luma(pixels in proptest::collection::vec(any::<[u8; 3]>(), 1..64), v: u8) {
        let rgb: Vec<u8> = pixels.iter().flatten().copied().collect();
        let mut gray = vec![0u8; pixels.len()];
        rgb_to_gray(&rgb, &mut gray).unwrap();
        for (g, [r, gr, b]) in gray.iter().zip(&pixels) {
            let luma = 0.299 * f64::from(*r) + 0.587 * f64::from(*gr) + 0.114 * f64::from(*b);
            prop_assert!((f64::from(*g) - luma).abs() <= 0.53, "{g} for luma {luma}");
        }
        let mut one = [0u8; 1];
        rgb_to_gray(&[v, v, v], &mut one).unwrap();
        prop_assert_eq!(one[0], v);
    }

    #[test]
    fn max_frames_is_the_elementwise_max(pairs in proptest::collection::vec(any::<(u8, u8)>(), 0..100)) {
        let (a, b): (Vec<u8>, Vec<u8>) = pairs.iter().copied().unzip();
        let mut out = vec![0u8; a.len()];
        max_frames(&a, &b, &mut out).unwrap();
        for (o, (x, y)) in out.iter().zip(&pairs) {
            prop_assert_eq!(*o, (*x).max(*y));
        }
        prop_assert!(max_frames(&a, &b, &mut vec![0u8; a.len() + 1]).is_err());
        prop_assert!(max_frames(&a, &[0u8; 101], &mut out).is_err());
    }

    /// Rounding to bytes is OpenCV's: half to even, clamped to 0..=255, for any value
    /// (NaN to 0).
    #[test]
    fn saturate_rounds_half_to_even_and_clamps(bits in any::<u32>(), near in -2.0f32..258.0) {
        let want = |v: f32| v.round_ties_even().clamp(0.0, 255.0) as u8;
        let value = f32::from_bits(bits);
        prop_assert_eq!(saturate(value), want(value), "{}", value);
        prop_assert_eq!(saturate(near), want(near), "{}", near);
        let half = near.floor() + 0.5;
        prop_assert_eq!(saturate(half), want(half), "{}", half);
    }

    /// A line through the horizontal taps gives, bit for bit, what adding each tap into
    /// its output column in memory gives (the loop before the sums stayed in registers).
    #[test]
    fn horizontal_taps_sum_as_the_scattered_loop(
        line in proptest::collection::vec(any::<u8>(), 2..300), shrink in 1.01f64..5.0,
    ) {
        let dst_len = ((line.len() as f64 / shrink) as usize).max(1);
        let taps = area_taps(line.len(), dst_len, 1.0 / (dst_len as f64 / line.len() as f64));
        let mut want = vec![0.0f32; dst_len];
        for tap in &taps {
            want[tap.dst] += f32::from(line[tap.src]) * tap.weight;
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for isa in isas() {
            let mut got = vec![f32::NAN; dst_len];
            Horizontal::new(isa, &taps, line.len(), dst_len).sum_line(&line, &mut got);
            prop_assert_eq!(bits(&got), bits(&want), "{:?}", isa);
        }
    }

    /// Every instruction set converts to gray with the same bytes, for any length (whole
    /// blocks of 16 pixels and the rest).
    #[test]
    fn gray_is_the_same_on_every_instruction_set(
        rgb in proptest::collection::vec(any::<u8>(), 0..200).prop_map(|mut v| { v.truncate(v.len() / 3 * 3); v }),
    ) {
        let mut want = vec![0u8; rgb.len() / 3];
        gray_on(Isa::Scalar, &rgb, &mut want);
        for isa in isas() {
            let mut got = vec![7u8; rgb.len() / 3];
            gray_on(isa, &rgb, &mut got);
            prop_assert_eq!(&got, &want, "{:?}", isa);
        }
    }

    /// Every instruction set resizes with the same bytes: windowed and gathered taps,
    /// whole chunks and the rest, and the Atari frame.
    #[test]
    fn area_resize_is_the_same_on_every_instruction_set(
        (image, src, dst) in image_and_sizes(),
        frame in proptest::collection::vec(any::<u8>(), 210 * 160),
    ) {
        for (image, src, dst) in [(&image, src, dst), (&frame, [210, 160], [84, 84])] {
            let mut want = vec![0u8; dst[0] * dst[1]];
            AreaResize::new_on(Isa::Scalar, src, dst).unwrap().resize(image, &mut want).unwrap();
            for isa in isas() {
                let mut got = vec![0u8; dst[0] * dst[1]];
                AreaResize::new_on(isa, src, dst).unwrap().resize(image, &mut got).unwrap();
                prop_assert_eq!(&got, &want, "{:?} {:?} -> {:?}", isa, src, dst);
            }
        }
    }

    /// Area resizing is the exact area mean, rounded.
    #[test]
    fn area_resize_is_the_rounded_area_mean((image, src, dst) in image_and_sizes()) {
        let mut out = vec![0u8; dst[0] * dst[1]];
        resize_area(&image, src, &mut out, dst).unwrap();
        for (i, (o, mean)) in out.iter().zip(exact_area_mean(&image, src, dst)).enumerate() {
            prop_assert!((f64::from(*o) - mean).abs() <= 0.5 + 1e-3, "pixel {}: {} for mean {}", i, o, mean);
        }
    }

    #[test]
    fn constant_images_stay_constant(v: u8, (_, src, dst) in image_and_sizes()) {
        let mut out = vec![0u8; dst[0] * dst[1]];
        resize_area(&vec![v; src[0] * src[1]], src, &mut out, dst).unwrap();
        prop_assert!(out.iter().all(|&p| p == v), "{:?}", out);
        let mut atari = vec![0u8; 84 * 84];
        resize_area(&vec![v; 210 * 160], [210, 160], &mut atari, [84, 84]).unwrap();
        prop_assert!(atari.iter().all(|&p| p == v));
    }

    /// 168 x 168 to 84 x 84 halves: every output is its 2 x 2 block's mean, half up.
    #[test]
    fn halving_gives_block_means_rounded_half_up(image in proptest::collection::vec(any::<u8>(), 168 * 168)) {
        let mut out = vec![0u8; 84 * 84];
        resize_area(&image, [168, 168], &mut out, [84, 84]).unwrap();
        for y in 0..84 {
            for x in 0..84 {
                let at = |r: usize, c: usize| u32::from(image[r * 168 + c]);
                let sum = at(2 * y, 2 * x) + at(2 * y, 2 * x + 1) + at(2 * y + 1, 2 * x) + at(2 * y + 1, 2 * x + 1);
                prop_assert_eq!(u32::from(out[y * 84 + x]), (sum + 2) / 4);
            }
        }
        // Blocks of one value come back as that value.
        let blocks: Vec<u8> = (0..168 * 168).map(|i| image[(i / 168 / 2) * 84 + (i % 168) / 2]).collect();
        resize_area(&blocks, [168, 168], &mut out, [84, 84]).unwrap();
        prop_assert_eq!(&out[..], &image[..84 * 84]);
    }

    /// The stack against a `VecDeque` of its last `depth` frames.
    #[test]
    fn frame_stack_keeps_the_last_frames_oldest_first(
        depth in 1usize..6,
        pushes in proptest::collection::vec(any::<u8>(), 1..30),
        zeros: bool,
    ) {
        let padding = if zeros { StackPadding::Zeros } else { StackPadding::Repeat };
        let mut stack = FrameStack::new(depth, 3).unwrap();
        let mut model: VecDeque<[u8; 3]> = VecDeque::new();
        let mut out = vec![0u8; depth * 3];
        for (i, &v) in pushes.iter().enumerate() {
            let frame = [v, v.wrapping_add(1), v.wrapping_add(2)];
            stack.push_with(|slot| slot.copy_from_slice(&frame));
            if i == 0 {
                stack.pad(padding);
                let pad = if zeros { [0; 3] } else { frame };
                model.extend(std::iter::repeat_n(pad, depth - 1));
            }
            model.push_back(frame);
            if model.len() > depth {
                model.pop_front();
            }
            stack.write_stacked(&mut out).unwrap();
            let want: Vec<u8> = model.iter().flatten().copied().collect();
            prop_assert_eq!(&out, &want);
            prop_assert_eq!(stack.frame(0), &frame[..]);
        }
    }
}

#[test]
fn frame_stack_order_and_errors() {
    let mut stack = FrameStack::new(4, 2).unwrap();
    assert_eq!(
        (stack.depth(), stack.frame_len(), stack.stacked_len()),
        (4, 2, 8)
    );
    stack.push(&[1, 1]).unwrap();
    stack.pad(StackPadding::Repeat);
    for v in 2..=3 {
        stack.push(&[v, v]).unwrap();
    }
    let mut obs = [0u8; 8];
    stack.write_stacked(&mut obs).unwrap();
    assert_eq!(obs, [1, 1, 1, 1, 2, 2, 3, 3]);
    assert_eq!((stack.frame(0), stack.frame(3)), (&[3, 3][..], &[1, 1][..]));
    assert!(stack.push(&[1]).is_err());
    assert!(stack.write_stacked(&mut [0u8; 7]).is_err());
    assert!(FrameStack::new(0, 2).is_err());
    assert!(FrameStack::new(2, 0).is_err());
}
