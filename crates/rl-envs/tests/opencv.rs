//! Golden tests: grayscale and area resizing against OpenCV, recorded from
//! opencv-python-headless 5.0.0 with IPP on (`tests/fixtures/record_opencv.py`; 4.14.0
//! records the same bytes). Every output pixel must be equal.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

use rl_envs::{AreaResize, resize_area, rgb_to_gray};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    opencv: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    kind: String,
    salt: u64,
    src: [usize; 2],
    dst: [usize; 2],
    out: String,
}

/// The recording script's input images: a 32-bit hash of the pixel index.
fn image(n: usize, salt: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| {
            let v = i.wrapping_mul(2_654_435_761).wrapping_add(salt * 40_503) & 0xffff_ffff;
            let v = (v ^ (v >> 15)).wrapping_mul(2_246_822_519) & 0xffff_ffff;
            ((v >> 13) & 255) as u8
        })
        .collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The recorded 210 × 160 RGB frame in gray.
fn gray_frame(salt: u64) -> Vec<u8> {
    let mut gray = vec![0u8; 210 * 160];
    rgb_to_gray(&image(210 * 160 * 3, salt), &mut gray).unwrap();
    gray
}

#[test]
fn gray_and_area_resize_equal_opencv_pixel_for_pixel() {
    let text = include_str!("fixtures/opencv_pixels.json");
    let fixture: Fixture = serde_json::from_str(text).unwrap();
    assert!(fixture.opencv.starts_with('5'), "{}", fixture.opencv);
    assert_eq!(fixture.cases.len(), 14);
    for case in &fixture.cases {
        let want = unhex(&case.out);
        let [src, dst] = [case.src, case.dst];
        let got = match case.kind.as_str() {
            "gray" => gray_frame(case.salt),
            kind => {
                let input = if kind == "pipeline" {
                    gray_frame(case.salt)
                } else {
                    image(src[0] * src[1], case.salt)
                };
                let mut out = vec![0u8; dst[0] * dst[1]];
                resize_area(&input, src, &mut out, dst).unwrap();
                // A kept AreaResize gives the same pixels, call after call.
                let mut kept = AreaResize::new(src, dst).unwrap();
                let mut again = vec![0u8; out.len()];
                for _ in 0..2 {
                    kept.resize(&input, &mut again).unwrap();
                    assert_eq!(again, out);
                }
                out
            }
        };
        let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            (got.len(), differ),
            (want.len(), 0),
            "{} {:?} -> {:?}",
            case.kind,
            src,
            dst
        );
    }
}
