use super::*;

fn small(parts: usize) -> PartialLargeDiscrete {
    PartialLargeDiscrete::with_task(LargeDiscrete::with_actions(2000, 3).unwrap(), parts, 7)
        .unwrap()
}

#[test]
fn the_context_is_revealed_a_block_per_step_and_only_the_last_step_pays() {
    let mut env = small(4);
    let mut obs = vec![0.0f32; CONTEXT_DIM + 4];
    env.reset(Some(1), &mut obs).unwrap();
    let context = env.context().to_vec();
    for k in 0..4 {
        // Block k shown, the rest zero, then the one-hot step index.
        for (i, &value) in obs[..CONTEXT_DIM].iter().enumerate() {
            let want = if i / 4 == k { context[i] } else { 0.0 };
            assert_eq!(value, want, "step {k}, element {i}");
        }
        let one_hot: Vec<f32> = (0..4).map(|j| f32::from(u8::from(j == k))).collect();
        assert_eq!(obs[CONTEXT_DIM..], one_hot);
        let (best, mean) = env.task().best_action(&context).unwrap();
        let step = env.step(&[best], &mut obs).unwrap();
        if k < 3 {
            assert_eq!(
                (step.reward, step.terminated, step.truncated),
                (0.0, false, false)
            );
        } else {
            assert!(step.terminated && !step.truncated);
            assert!(
                (step.reward - mean).abs() < 0.6,
                "{} vs {mean}",
                step.reward
            );
        }
    }
    assert!(matches!(
        env.step(&[0], &mut obs),
        Err(Error::NeedsReset { .. })
    ));
}

#[test]
fn memory_is_worth_a_clear_margin() {
    let env = small(4);
    let full = env.optimal_reward(4000, 11);
    let memoryless = env.memoryless_optimal_reward(4000, 11);
    // Seeing a quarter of the context recovers about half the optimum (sqrt(4/16)).
    assert!(
        memoryless.mean < 0.65 * full.mean && memoryless.mean > 0.3 * full.mean,
        "{memoryless:?} vs {full:?}"
    );
    assert!(full.mean - memoryless.mean > 10.0 * (full.std_error + memoryless.std_error));
    // One block is the whole context: nothing to remember.
    let whole = small(1);
    let (a, b) = (
        whole.optimal_reward(2000, 5).mean,
        whole.memoryless_optimal_reward(2000, 5).mean,
    );
    assert!((a - b).abs() < 1e-6, "{a} vs {b}");
}

#[test]
fn bad_settings_and_buffers_are_refused() {
    for parts in [0, 3, 5, 32] {
        let err =
            PartialLargeDiscrete::with_task(LargeDiscrete::with_actions(10, 0).unwrap(), parts, 0)
                .unwrap_err();
        assert!(err.to_string().contains("parts"), "{err}");
    }
    let mut env = small(2);
    let mut short = vec![0.0f32; CONTEXT_DIM];
    assert!(env.reset(None, &mut short).is_err());
    let mut obs = vec![0.0f32; CONTEXT_DIM + 2];
    assert!(matches!(
        env.step(&[0], &mut obs),
        Err(Error::NeedsReset { .. })
    ));
    env.reset(None, &mut obs).unwrap();
    assert!(matches!(
        env.step(&[2000], &mut obs),
        Err(Error::ActionOutOfRange {
            index: 2000,
            n: 2000
        })
    ));
    assert_eq!(env.observation_space().flat_len(), CONTEXT_DIM + 2);
    assert_eq!(env.memory_plan().grand_total(), 2000 * 8 * 4);
}
