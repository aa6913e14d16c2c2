//! The facade exposes every environment through `rl::envs`, and stepping through the
//! generic `Env` interface allocates nothing.

use rl::core::{BoxSpace, DType, Env, Space, Step};
use rl::envs::{
    AtariConfig, AtariPreprocess, CartPole, Catch, DeepSea, LargeDiscrete, MaskedCartPole, Pendulum,
};
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
    assert_eq!(allocations_while_stepping(Catch::new(0), &[2], 10_000), 0);
    let scaled = Catch::new(0).with_scale(4).unwrap();
    assert_eq!(allocations_while_stepping(scaled, &[0], 10_000), 0);
    let sea = DeepSea::new(12, 0).unwrap();
    assert_eq!(allocations_while_stepping(sea, &[1], 10_000), 0);
}

/// An Atari-sized RGB screen (210 x 160 x 3) that changes every frame; games end after
/// 500 frames.
struct Screens {
    t: u32,
    observation_space: Space,
    action_space: Space,
}

impl Env for Screens {
    type Obs = u8;
    type Act = u32;
    fn observation_space(&self) -> &Space {
        &self.observation_space
    }
    fn action_space(&self) -> &Space {
        &self.action_space
    }
    fn reset(&mut self, _: Option<u64>, obs: &mut [u8]) -> rl::core::Result<()> {
        self.t = 0;
        obs.fill(7);
        Ok(())
    }
    fn step(&mut self, _: &[u32], obs: &mut [u8]) -> rl::core::Result<Step> {
        self.t += 1;
        for (i, o) in obs.iter_mut().enumerate() {
            *o = (i as u32).wrapping_mul(31).wrapping_add(self.t) as u8;
        }
        Ok(Step {
            reward: 1.0,
            terminated: self.t == 500,
            truncated: false,
        })
    }
}

#[test]
fn atari_preprocessing_allocates_nothing_per_step() {
    let screens = Screens {
        t: 0,
        observation_space: Space::Box(
            BoxSpace::uniform(0.0, 255.0, &[210, 160, 3], DType::U8).unwrap(),
        ),
        action_space: Space::discrete(4).unwrap(),
    };
    let env = AtariPreprocess::new(screens, AtariConfig::default(), 0).unwrap();
    assert_eq!(env.observation_space().flat_len(), 4 * 84 * 84);
    assert_eq!(allocations_while_stepping(env, &[1], 2_000), 0);
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
