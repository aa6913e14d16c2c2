use super::*;

/// Plays one episode choosing `right(step)` to move right or not; returns the return,
/// the steps taken and the last step's flags.
fn play(env: &mut DeepSea, mut right: impl FnMut(usize) -> bool) -> (f32, usize, Step) {
    let n = env.size();
    let mut obs = vec![0.0f32; n * n];
    env.reset(None, &mut obs).unwrap();
    let (mut total, mut steps) = (0.0, 0);
    loop {
        let (row, column) = env.position();
        assert_eq!(obs.iter().sum::<f32>(), 1.0);
        assert_eq!(obs[row * n + column], 1.0, "one-hot at ({row}, {column})");
        let move_right = right(steps);
        let a = env.right_action(row, column);
        let step = env
            .step(&[if move_right { a } else { 1 - a }], &mut obs)
            .unwrap();
        total += step.reward;
        steps += 1;
        if step.ends_episode() {
            assert!(
                obs.iter().all(|&o| o == 0.0),
                "the final observation is empty"
            );
            return (total, steps, step);
        }
    }
}

#[test]
fn always_right_earns_one_minus_the_move_cost_in_n_steps() {
    for n in [1, 2, 5, 12, 30] {
        let mut env = DeepSea::new(n, 7).unwrap();
        let (total, steps, last) = play(&mut env, |_| true);
        assert!((total - 0.99).abs() < 1e-5, "n {n}: {total}");
        assert!((total - env.optimal_return()).abs() < 1e-5);
        assert_eq!(steps, n);
        assert!(last.terminated && !last.truncated);
        assert_eq!(env.position(), (n, n - 1));
    }
}

#[test]
fn every_other_path_returns_at_most_zero_and_lasts_n_steps() {
    // All 2^8 paths of an 8 x 8 sea: only the all-right one is rewarded.
    let n = 8;
    let mut env = DeepSea::new(n, 3).unwrap();
    for path in 0u32..(1 << n) {
        let (total, steps, last) = play(&mut env, |t| path >> t & 1 == 1);
        assert_eq!(steps, n);
        assert!(last.terminated);
        if path == (1 << n) - 1 {
            assert!(total > 0.98, "{total}");
        } else {
            assert!(total <= 0.0, "path {path:08b}: {total}");
            let rights = path.count_ones() as f32;
            assert!(
                (total + rights * 0.01 / n as f32).abs() < 1e-6,
                "path {path:08b}"
            );
        }
    }
}

#[test]
fn the_action_mapping_depends_on_the_seed_and_only_on_it() {
    let n = 12;
    let mapping = |seed| {
        let env = DeepSea::new(n, seed).unwrap();
        (0..n * n)
            .map(|i| env.right_action(i / n, i % n))
            .collect::<Vec<_>>()
    };
    assert_eq!(mapping(0), mapping(0));
    assert_ne!(mapping(0), mapping(1));
    let ones = mapping(5).iter().filter(|&&a| a == 1).count();
    // 144 fair coins: standard deviation 6; allow 5 sigma.
    assert!((ones as i64 - 72).abs() <= 30, "{ones}");
    // Resetting with a seed does not redraw the mapping.
    let mut env = DeepSea::new(n, 0).unwrap();
    env.reset(Some(99), &mut vec![0.0; n * n]).unwrap();
    let after: Vec<u32> = (0..n * n).map(|i| env.right_action(i / n, i % n)).collect();
    assert_eq!(after, mapping(0));
}

#[test]
fn misuse_is_an_error() {
    assert!(DeepSea::new(0, 0).is_err());
    assert!(DeepSea::new(DeepSea::MAX_SIZE + 1, 0).is_err());
    let mut env = DeepSea::new(3, 0).unwrap();
    let mut obs = [0.0f32; 9];
    assert!(env.step(&[0], &mut obs).is_err(), "step before reset");
    assert!(env.reset(None, &mut [0.0; 4]).is_err());
    env.reset(None, &mut obs).unwrap();
    assert!(env.step(&[2], &mut obs).is_err());
    for _ in 0..3 {
        env.step(&[0], &mut obs).unwrap();
    }
    assert!(env.step(&[0], &mut obs).is_err(), "step after the end");
}

#[test]
fn saved_states_restore_and_refuse_another_task() {
    let mut env = DeepSea::new(6, 1).unwrap();
    let mut obs = [0.0f32; 36];
    env.reset(None, &mut obs).unwrap();
    let right = env.right_action(0, 0);
    env.step(&[right], &mut obs).unwrap();
    let saved = env.save_state().unwrap();
    let mut copy = DeepSea::new(6, 1).unwrap();
    copy.restore_state(&saved).unwrap();
    assert_eq!(copy.position(), (1, 1));
    let mut other = DeepSea::new(6, 2).unwrap();
    assert!(other.restore_state(&saved).is_err());
}
