//! The policy interface collectors call, and two policies that need no network.

use std::marker::PhantomData;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Element, Space};

use crate::error::{Error, PolicyError, Result};

/// Where a policy writes what it decided for a batch of environments. Every slice is
/// owned by the collector and reused, so a policy that does not allocate keeps
/// collection allocation-free.
#[derive(Debug)]
pub struct ActOutput<'a, A> {
    /// `envs x action length` actions (one `u32` index per environment for discrete spaces).
    pub actions: &'a mut [A],
    /// Log-probability of each chosen action (leave as is if the policy has none).
    pub log_probs: &'a mut [f32],
    /// Value estimate of each observation (leave as is if the policy has none).
    pub values: &'a mut [f32],
}

/// Chooses actions for a batch of environments at once.
///
/// `states` holds one slot per environment for recurrent policies; collectors reset a
/// slot to `State::default()` when its environment starts a new episode. Feed-forward
/// policies use `()`.
pub trait Policy: Send {
    /// Observation element type (matches the environment's).
    type Obs: Element;
    /// Action element type (matches the environment's).
    type Act: Element;
    /// Per-environment memory.
    type State: Default + Clone + Send;

    /// Writes actions (and log-probs and values, if the policy has them) for
    /// `states.len()` environments whose observations are `obs`, row after row.
    ///
    /// # Errors
    /// Whatever the policy cannot do; collectors report it with the step.
    fn act(
        &mut self,
        obs: &[Self::Obs],
        states: &mut [Self::State],
        out: ActOutput<'_, Self::Act>,
    ) -> Result<(), PolicyError>;

    /// Whether the per-environment states never hold anything but their default, so a
    /// collector restored mid-episode with fresh states acts as the saved one would
    /// (collectors restore environments mid-episode only then). True when `State` is
    /// zero-sized; a policy whose state type can carry memory it does not use (a DQN
    /// with one head) says so here.
    fn stateless(&self) -> bool {
        size_of::<Self::State>() == 0
    }
}

/// A policy with a value function, needed for on-policy rollouts: the value of the
/// observation after the last step, and of final observations cut by a time limit,
/// bootstrap the returns.
pub trait ValuePolicy: Policy {
    /// Writes `V(obs)` for each of `states.len()` observations into `values`.
    ///
    /// # Errors
    /// Whatever the policy cannot do.
    fn values(
        &mut self,
        obs: &[Self::Obs],
        states: &[Self::State],
        values: &mut [f32],
    ) -> Result<(), PolicyError>;
}

/// Always the same action; log-probs and values 0. For tests and benches.
#[derive(Clone, Debug)]
pub struct ConstantPolicy<O, A> {
    action: Vec<A>,
    _obs: PhantomData<fn(O)>,
}

impl<O: Element, A: Element> ConstantPolicy<O, A> {
    /// A policy that answers `action` (one action's elements) in every state.
    pub fn new(action: &[A]) -> Self {
        Self {
            action: action.to_vec(),
            _obs: PhantomData,
        }
    }
}

impl<O: Element, A: Element> Policy for ConstantPolicy<O, A> {
    type Obs = O;
    type Act = A;
    type State = ();

    /// # Errors
    /// An action of another length than the environments take (or an empty one):
    /// nothing is written.
    fn act(
        &mut self,
        _obs: &[O],
        states: &mut [()],
        out: ActOutput<'_, A>,
    ) -> Result<(), PolicyError> {
        let envs = states.len().max(1);
        if self.action.is_empty() || out.actions.len() != envs * self.action.len() {
            return Err(Box::new(rl_core::Error::config(
                "ConstantPolicy action",
                format!(
                    "has {} elements but the environments take {} per action: give exactly one action's elements",
                    self.action.len(),
                    out.actions.len() / envs
                ),
            )));
        }
        for action in out.actions.chunks_exact_mut(self.action.len()) {
            action.copy_from_slice(&self.action);
        }
        out.log_probs.fill(0.0);
        out.values.fill(0.0);
        Ok(())
    }
}

impl<O: Element, A: Element> ValuePolicy for ConstantPolicy<O, A> {
    fn values(
        &mut self,
        _obs: &[O],
        _states: &[()],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        values.fill(0.0);
        Ok(())
    }
}

/// Draws uniformly random actions from an action space: indices for discrete spaces,
/// values within bounds for boxes (which must be finite).
#[derive(Clone, Debug)]
pub struct ActionSampler {
    kind: SamplerKind,
    rng: Xoshiro256PlusPlus,
}

#[derive(Clone, Debug)]
enum SamplerKind {
    Discrete(u32),
    Box { low: Vec<f32>, high: Vec<f32> },
}

impl ActionSampler {
    /// A sampler over `space`, seeded with `seed`.
    ///
    /// # Errors
    /// A box with an infinite bound (no uniform distribution over it).
    pub fn new(space: &Space, seed: u64) -> Result<Self> {
        let kind = match space {
            Space::Discrete { n } => SamplerKind::Discrete(*n),
            Space::Box(b) => {
                let len = b.flat_len();
                let (low, high): (Vec<f32>, Vec<f32>) =
                    (0..len).map(|i| (b.low(i), b.high(i))).unzip();
                if low.iter().chain(&high).any(|v| !v.is_finite()) {
                    return Err(Error::config(
                        "action space",
                        "has an infinite bound: random actions need a bounded box",
                    ));
                }
                SamplerKind::Box { low, high }
            }
        };
        Ok(Self {
            kind,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        })
    }
}

impl ActionSampler {
    /// The random stream (saved with a collector's state).
    pub(crate) fn rng(&self) -> &Xoshiro256PlusPlus {
        &self.rng
    }

    pub(crate) fn rng_mut(&mut self) -> &mut Xoshiro256PlusPlus {
        &mut self.rng
    }
}

/// Action element types an [`ActionSampler`] can draw.
pub trait RandomAction: Element {
    /// Fills `actions` (whole actions, row after row) with uniform random actions.
    ///
    /// # Errors
    /// The sampler's space does not produce this element type.
    fn fill(sampler: &mut ActionSampler, actions: &mut [Self]) -> Result<()>;
}

impl RandomAction for u32 {
    fn fill(sampler: &mut ActionSampler, actions: &mut [u32]) -> Result<()> {
        match sampler.kind {
            SamplerKind::Discrete(n) => {
                for a in actions {
                    *a = sampler.rng.random_range(0..n);
                }
                Ok(())
            }
            SamplerKind::Box { .. } => Err(Error::config(
                "random actions",
                "are f32 for a box space, not u32",
            )),
        }
    }
}

impl RandomAction for f32 {
    fn fill(sampler: &mut ActionSampler, actions: &mut [f32]) -> Result<()> {
        match &sampler.kind {
            SamplerKind::Box { low, high } => {
                for action in actions.chunks_exact_mut(low.len()) {
                    for ((a, &lo), &hi) in action.iter_mut().zip(low).zip(high) {
                        *a = lo + (hi - lo) * sampler.rng.random::<f32>();
                    }
                }
                Ok(())
            }
            SamplerKind::Discrete(_) => Err(Error::config(
                "random actions",
                "are u32 for a discrete space, not f32",
            )),
        }
    }
}

/// Uniformly random actions; log-probs and values 0. For tests, benches and warm-up.
#[derive(Clone, Debug)]
pub struct RandomPolicy<O, A> {
    sampler: ActionSampler,
    _types: PhantomData<fn(O) -> A>,
}

impl<O: Element, A: RandomAction> RandomPolicy<O, A> {
    /// A random policy over `space`.
    ///
    /// # Errors
    /// As [`ActionSampler::new`], or a space whose actions are not `A`.
    pub fn new(space: &Space, seed: u64) -> Result<Self> {
        if space.dtype() != A::DTYPE {
            return Err(Error::config(
                "random policy",
                format!(
                    "draws {} actions but the space holds {}",
                    A::DTYPE,
                    space.dtype()
                ),
            ));
        }
        Ok(Self {
            sampler: ActionSampler::new(space, seed)?,
            _types: PhantomData,
        })
    }
}

impl<O: Element, A: RandomAction> Policy for RandomPolicy<O, A> {
    type Obs = O;
    type Act = A;
    type State = ();

    fn act(
        &mut self,
        _obs: &[O],
        _states: &mut [()],
        out: ActOutput<'_, A>,
    ) -> Result<(), PolicyError> {
        A::fill(&mut self.sampler, out.actions)?;
        out.log_probs.fill(0.0);
        out.values.fill(0.0);
        Ok(())
    }
}

impl<O: Element, A: RandomAction> ValuePolicy for RandomPolicy<O, A> {
    fn values(
        &mut self,
        _obs: &[O],
        _states: &[()],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        values.fill(0.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rl_core::{BoxSpace, DType};

    #[test]
    fn random_actions_stay_in_the_space() {
        let discrete = Space::discrete(5).unwrap();
        let mut policy = RandomPolicy::<f32, u32>::new(&discrete, 1).unwrap();
        let (mut actions, mut lp, mut v) = (vec![0u32; 1000], vec![1.0; 1000], vec![1.0; 1000]);
        let mut states = vec![(); 1000];
        policy
            .act(
                &[],
                &mut states,
                ActOutput {
                    actions: &mut actions,
                    log_probs: &mut lp,
                    values: &mut v,
                },
            )
            .unwrap();
        assert!(actions.iter().all(|&a| a < 5));
        assert!((0..5).all(|k| actions.contains(&k)));
        let boxed =
            Space::Box(BoxSpace::new(vec![-2.0, 0.0], vec![2.0, 1.0], &[2], DType::F32).unwrap());
        let mut policy = RandomPolicy::<f32, f32>::new(&boxed, 2).unwrap();
        let mut actions = vec![0.0f32; 2000];
        policy
            .act(
                &[],
                &mut states,
                ActOutput {
                    actions: &mut actions,
                    log_probs: &mut lp,
                    values: &mut v,
                },
            )
            .unwrap();
        for a in actions.chunks_exact(2) {
            assert!(boxed.contains(a), "{a:?}");
        }
        assert!(RandomPolicy::<f32, f32>::new(&discrete, 0).is_err());
        let unbounded =
            Space::Box(BoxSpace::uniform(f32::NEG_INFINITY, 0.0, &[1], DType::F32).unwrap());
        assert!(RandomPolicy::<f32, f32>::new(&unbounded, 0).is_err());
    }
}
