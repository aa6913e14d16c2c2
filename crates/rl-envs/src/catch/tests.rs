use super::*;

/// Moves the paddle toward the ball's column.
fn toward_ball(env: &Catch) -> u32 {
    let (_, ball) = env.ball();
    match ball.cmp(&env.paddle()) {
        std::cmp::Ordering::Less => 0,
        std::cmp::Ordering::Equal => 1,
        std::cmp::Ordering::Greater => 2,
    }
}

/// The lit cells of a frame drawn `scale` pixels per cell, as `(row, column)`, after
/// checking that every cell is a uniform `scale × scale` square of 0 or 255.
fn lit_cells(frame: &[u8], scale: usize) -> Vec<(usize, usize)> {
    let width = COLUMNS * scale;
    assert_eq!(frame.len(), ROWS * width * scale);
    let mut cells = Vec::new();
    for row in 0..ROWS {
        for column in 0..COLUMNS {
            let value = frame[row * scale * width + column * scale];
            assert!(value == 0 || value == LIT, "pixel value {value}");
            for y in row * scale..(row + 1) * scale {
                for x in column * scale..(column + 1) * scale {
                    assert_eq!(
                        frame[y * width + x],
                        value,
                        "cell ({row}, {column}) not uniform"
                    );
                }
            }
            if value == LIT {
                cells.push((row, column));
            }
        }
    }
    cells
}

#[test]
fn the_ball_falls_a_row_per_step_and_the_episode_ends_after_nine_steps() {
    let mut env = Catch::new(5);
    let mut frame = [0u8; 50];
    env.reset(None, &mut frame).unwrap();
    let (row, column) = env.ball();
    assert_eq!((row, env.paddle()), (0, 2));
    assert_eq!(lit_cells(&frame, 1), vec![(0, column), (9, 2)]);
    for t in 1..=Catch::EPISODE_STEPS {
        let step = env.step(&[1], &mut frame).unwrap();
        assert_eq!(env.ball(), (t as usize, column));
        assert!(!step.truncated);
        assert_eq!(step.terminated, t == 9, "step {t}");
        let expected = match (t == 9, column == 2) {
            (false, _) => 0.0,
            (true, true) => 1.0,
            (true, false) => -1.0,
        };
        assert_eq!(step.reward, expected, "step {t}");
        let mut want = vec![(t as usize, column), (9, 2)];
        want.sort_unstable();
        want.dedup();
        assert_eq!(lit_cells(&frame, 1), want, "step {t}");
    }
    assert!(matches!(
        env.step(&[1], &mut frame),
        Err(Error::NeedsReset { .. })
    ));
}

#[test]
fn the_paddle_moves_and_is_clamped_at_the_edges() {
    let mut env = Catch::new(0);
    let mut frame = [0u8; 50];
    env.reset(None, &mut frame).unwrap();
    let moves = [
        (0, 1),
        (0, 0),
        (0, 0),
        (1, 0),
        (2, 1),
        (2, 2),
        (2, 3),
        (2, 4),
        (2, 4),
    ];
    for (action, paddle) in moves {
        env.step(&[action], &mut frame).unwrap();
        assert_eq!(env.paddle(), paddle);
        assert!(lit_cells(&frame, 1).contains(&(9, paddle)));
    }
}

#[test]
fn a_scripted_policy_catches_every_ball_and_a_random_one_scores_about_minus_0_6() {
    let mut env = Catch::new(11);
    let mut frame = [0u8; 50];
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(99);
    let episodes = 4000;
    let (mut scripted, mut random) = (0.0f64, 0.0f64);
    for _ in 0..episodes {
        env.reset(None, &mut frame).unwrap();
        loop {
            let step = env.step(&[toward_ball(&env)], &mut frame).unwrap();
            if step.terminated {
                assert_eq!(step.reward, 1.0, "the scripted policy missed");
                scripted += f64::from(step.reward);
                break;
            }
        }
        env.reset(None, &mut frame).unwrap();
        loop {
            let step = env.step(&[rng.random_range(0..3)], &mut frame).unwrap();
            if step.terminated {
                random += f64::from(step.reward);
                break;
            }
        }
    }
    assert_eq!(scripted, f64::from(episodes));
    let mean = random / f64::from(episodes);
    // A random walk of 9 steps from column 2 ends under a uniform ball about 1 time in 5;
    // 4000 episodes put the standard error near 0.013.
    assert!((mean + 0.6).abs() < 0.06, "random policy mean {mean}");
}

#[test]
fn scaled_frames_draw_each_cell_as_a_square() {
    let mut env = Catch::new(2).with_scale(3).unwrap();
    assert_eq!(env.scale(), 3);
    let space = env.observation_space().clone();
    let Space::Box(frame_box) = &space else {
        panic!("a box space")
    };
    assert_eq!(frame_box.shape(), &[1, 30, 15]);
    assert_eq!(frame_box.dtype(), DType::U8);
    let mut frame = vec![0u8; space.flat_len()];
    env.reset(Some(4), &mut frame).unwrap();
    assert!(space.contains(&frame));
    for _ in 0..4 {
        env.step(&[2], &mut frame).unwrap();
        let (row, column) = env.ball();
        assert_eq!(lit_cells(&frame, 3), vec![(row, column), (9, env.paddle())]);
        assert_eq!(frame.iter().filter(|&&p| p == LIT).count(), 2 * 9);
    }
    assert!(Catch::new(0).with_scale(0).is_err());
    assert!(Catch::new(0).with_scale(Catch::MAX_SCALE + 1).is_err());
}

#[test]
fn invalid_input_is_refused_and_changes_nothing() {
    let mut env = Catch::new(1);
    let mut frame = [0u8; 50];
    assert!(matches!(
        env.step(&[1], &mut frame),
        Err(Error::NeedsReset { .. })
    ));
    env.reset(Some(1), &mut frame).unwrap();
    let state = env.save_state().unwrap();
    let seen = frame;
    assert!(matches!(
        env.step(&[3], &mut frame),
        Err(Error::ActionOutOfRange { index: 3, n: 3 })
    ));
    assert!(env.step(&[0, 1], &mut frame).is_err());
    assert!(env.step(&[0], &mut [0u8; 49]).is_err());
    assert!(env.reset(None, &mut [0u8; 51]).is_err());
    assert_eq!(env.save_state().unwrap(), state);
    assert_eq!(frame, seen);
}

#[test]
fn seeds_decide_the_ball_column() {
    let mut frame = [0u8; 50];
    let mut columns = |seed| {
        let mut env = Catch::new(seed);
        (0..20)
            .map(|_| {
                env.reset(None, &mut frame).unwrap();
                env.ball().1
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(columns(7), columns(7));
    assert_ne!(columns(7), columns(8));
    let all = columns(3);
    assert!((0..COLUMNS).all(|c| all.contains(&c)), "{all:?}");
}

#[test]
fn damaged_states_are_refused() {
    let mut env = Catch::new(1);
    let mut frame = [0u8; 50];
    env.reset(Some(1), &mut frame).unwrap();
    let state = env.save_state().unwrap();
    let text = String::from_utf8(state.clone()).unwrap();
    for damaged in [
        text.replace("\"paddle_column\":2", "\"paddle_column\":5"),
        text.replace("\"ball_row\":0", "\"ball_row\":9"),
    ] {
        assert_ne!(damaged, text);
        let error = env.restore_state(damaged.as_bytes()).unwrap_err();
        assert!(matches!(error, Error::EnvState { .. }), "{error}");
        assert_eq!(env.save_state().unwrap(), state);
    }
}
