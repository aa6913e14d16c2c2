//! The facade exposes every environment through `rl::envs`, and stepping through the
//! generic `Env` interface allocates nothing.

use rl::core::Env;
use rl::envs::{CartPole, LargeDiscrete, MaskedCartPole, Pendulum};
use rl_testkit::{CountingAllocator, measure};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Steps `env` for `steps` steps with `action`, resetting at episode ends, and returns
/// the number of allocations made while stepping (after the first reset).
fn allocations_while_stepping<E: Env>(mut env: E, action: &[E::Act], steps: usize) -> u64 {
    let mut obs = vec![E::Obs::default(); env.observation_space().flat_len()];
    env.reset(Some(1), &mut obs).unwrap();
    let (result, stats) = measure(|| -> rl::core::Result<()> {
        for _ in 0..steps {
            if env.step(action, &mut obs)?.ends_episode() {
                env.reset(None, &mut obs)?;
            }
        }
        Ok(())
    });
    result.unwrap();
    stats.allocations
}

#[test]
fn stepping_any_reference_env_allocates_nothing() {
    assert_eq!(
        allocations_while_stepping(CartPole::new(0), &[1], 10_000),
        0
    );
    assert_eq!(
        allocations_while_stepping(MaskedCartPole::new(0), &[0], 10_000),
        0
    );
    assert_eq!(
        allocations_while_stepping(Pendulum::new(0), &[0.3], 10_000),
        0
    );
    let large = LargeDiscrete::with_actions(1000, 0).unwrap();
    assert_eq!(allocations_while_stepping(large, &[999], 10_000), 0);
}

#[test]
fn cloned_large_discrete_envs_share_one_feature_table() {
    let env = LargeDiscrete::with_actions(10_000, 3).unwrap();
    let (copies, stats) = measure(|| (0..8).map(|_| env.clone()).collect::<Vec<_>>());
    for copy in &copies {
        assert!(
            copy.action_features()
                .shares_storage_with(env.action_features())
        );
    }
    // Eight copies of a 320 KB table would be 2.5 MB; sharing costs a few hundred bytes each.
    assert!(stats.allocated_bytes < 8 * 1024, "{stats:?}");
}
