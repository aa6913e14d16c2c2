use rl_core::{Env, Space};

use crate::{Catch, FrameStacked};

/// Catch frames are 10 x 5 pixels.
const FRAME: usize = 50;

#[test]
fn observations_are_the_last_frames_oldest_first_with_the_first_repeated() {
    let mut plain = Catch::new(3);
    let mut stacked = FrameStacked::new(Catch::new(3), 3).unwrap();
    let (mut frame, mut obs) = (vec![0u8; FRAME], vec![0u8; 3 * FRAME]);
    let mut history: Vec<Vec<u8>> = Vec::new();
    for episode in 0..3 {
        plain.reset(Some(episode), &mut frame).unwrap();
        stacked.reset(Some(episode), &mut obs).unwrap();
        history.clear();
        history.push(frame.clone());
        for t in 0.. {
            // Expected: the last three frames, the first repeated where there are fewer.
            let expected: Vec<u8> = (0..3)
                .rev()
                .flat_map(|age| history[history.len().saturating_sub(1 + age)].clone())
                .collect();
            assert_eq!(obs, expected, "episode {episode} step {t}");
            let action = [(t % 3) as u32];
            let a = plain.step(&action, &mut frame).unwrap();
            let b = stacked.step(&action, &mut obs).unwrap();
            assert_eq!(
                (a.reward, a.terminated, a.truncated),
                (b.reward, b.terminated, b.truncated)
            );
            history.push(frame.clone());
            if a.terminated {
                break;
            }
        }
    }
}

#[test]
fn the_space_stacks_channels_and_bounds() {
    let env = FrameStacked::new(Catch::new(0), 4).unwrap();
    let Space::Box(space) = env.observation_space() else {
        panic!("a box");
    };
    assert_eq!(space.shape(), &[4, 10, 5]);
    assert_eq!(
        (space.low(4 * FRAME - 1), space.high(4 * FRAME - 1)),
        (0.0, 255.0)
    );
    assert!(FrameStacked::new(Catch::new(0), 0).is_err());
}

#[test]
fn a_wrong_buffer_is_refused() {
    let mut env = FrameStacked::new(Catch::new(0), 2).unwrap();
    let mut short = vec![0u8; FRAME];
    assert!(env.reset(Some(0), &mut short).is_err());
}
