//! The categorical actor-critic for discrete action spaces.

use std::fmt;

use dfdx::prelude::{
    Axis, BuildModule, Const, Cpu, Device, Dtype, Gradients, ModuleVisitor, NoneTape, Storage,
    SumTo, Tape, Tensor, TensorCollection, TensorFromVec, Trace, WithEmptyTape,
};
use dfdx::tensor_ops::SelectTo;
use rand::Rng;
use rl_collect::{ActOutput, Policy, PolicyError, ValuePolicy};
use rl_core::{Env, Space};
use rl_storage::Actions;

use super::mlp::{Activation, Mlp, Relu};
use super::shared::{PolicyCore, critic_values, delegate_to_core};
use super::{
    ActorCritic, Evaluation, Mode, PolicyConfig, check_len, check_rows, describe, rows_of,
};
use crate::error::{Error, Result};

/// The network of a [`CategoricalPolicy`]: an actor `OBS-HIDDEN-HIDDEN-ACTIONS` whose
/// outputs are the logits of a categorical distribution, and a separate critic
/// `OBS-HIDDEN-HIDDEN-1`. No shared trunk: actor and critic gradients never mix.
///
/// A dfdx [`TensorCollection`] visiting `actor` then `critic`.
pub struct CategoricalNet<
    const OBS: usize,
    const HIDDEN: usize,
    const ACTIONS: usize,
    A,
    E: Dtype,
    D: Storage<E>,
> {
    /// Observation to logits.
    pub actor: Mlp<OBS, HIDDEN, ACTIONS, A, E, D>,
    /// Observation to value.
    pub critic: Mlp<OBS, HIDDEN, 1, A, E, D>,
}

impl<const OBS: usize, const HIDDEN: usize, const ACTIONS: usize, A, E: Dtype, D: Storage<E>> Clone
    for CategoricalNet<OBS, HIDDEN, ACTIONS, A, E, D>
{
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            critic: self.critic.clone(),
        }
    }
}

impl<
    const OBS: usize,
    const HIDDEN: usize,
    const ACTIONS: usize,
    A: Activation,
    E: Dtype,
    D: Storage<E>,
> fmt::Debug for CategoricalNet<OBS, HIDDEN, ACTIONS, A, E, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CategoricalNet")
            .field("actor", &self.actor)
            .field("critic", &self.critic)
            .finish()
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACTIONS: usize, A: Activation, D: Device<f32>>
    TensorCollection<f32, D> for CategoricalNet<OBS, HIDDEN, ACTIONS, A, f32, D>
{
    type To<E2: Dtype, D2: Device<E2>> = CategoricalNet<OBS, HIDDEN, ACTIONS, A, E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, f32, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::module("actor", |s| &s.actor, |s| &mut s.actor),
                Self::module("critic", |s| &s.critic, |s| &mut s.critic),
            ),
            |(actor, critic)| CategoricalNet { actor, critic },
        )
    }
}

/// A categorical policy over `ACTIONS` discrete actions with a value function, for
/// observations of `OBS` `f32` elements.
///
/// - Actor `OBS-HIDDEN-HIDDEN-ACTIONS` (logits) and critic `OBS-HIDDEN-HIDDEN-1`, both
///   [`Mlp`]s with activation `A` ([`Relu`] by default, [`Tanh`](super::Tanh) on request).
///   dfdx's initialisation (uniform in `±1/sqrt(fan_in)`), then the output layers scaled
///   as [`PolicyConfig`] says (the actor's by 0.01 by default: a near-uniform first
///   policy) with zero biases.
/// - Owns its dfdx [`Cpu`] device, seeded with the construction seed (which fixes the
///   initial weights), and a separate seeded generator for sampling actions.
/// - [`Mode::Sample`] draws from `softmax(logits)`; [`Mode::Deterministic`] takes the
///   argmax (the lowest index among ties). Either way the log-prob written is that of the
///   chosen action under the current policy.
///
/// Cloning copies the weights and the sampling generator's state: reseed a clone with
/// [`CategoricalPolicy::reseed`] so that copies do not draw the same actions.
///
/// ```
/// use rl_algos::{ActorCritic, CategoricalPolicy, PolicyConfig};
/// use rl_envs::CartPole;
///
/// let policy = CategoricalPolicy::<4, 64, 2>::for_env(&CartPole::new(0), PolicyConfig::new(), 7)?;
/// let obs = [0.01f32, 0.0, -0.02, 0.0, 0.1, 0.2, 0.0, -0.1];
/// let (mut log_probs, mut values) = ([0.0f32; 2], [0.0f32; 2]);
/// policy.log_probs_and_values(&obs, &[0, 1], &mut log_probs, &mut values)?;
/// assert!(log_probs.iter().all(|lp| (lp - 0.5f32.ln()).abs() < 0.05)); // near uniform
/// # Ok::<(), rl_algos::Error>(())
/// ```
#[derive(Clone)]
pub struct CategoricalPolicy<
    const OBS: usize,
    const HIDDEN: usize,
    const ACTIONS: usize,
    A: Activation = Relu,
> {
    /// Its `scratch` holds the `rows x ACTIONS` log-probabilities of the last `act`.
    core: PolicyCore<CategoricalNet<OBS, HIDDEN, ACTIONS, A, f32, Cpu>, OBS>,
}

impl<const OBS: usize, const HIDDEN: usize, const ACTIONS: usize, A: Activation> fmt::Debug
    for CategoricalPolicy<OBS, HIDDEN, ACTIONS, A>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug_as("CategoricalPolicy", f)
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACTIONS: usize, A: Activation>
    CategoricalPolicy<OBS, HIDDEN, ACTIONS, A>
{
    /// A policy whose weights come from a device seeded with `seed`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config` or a zero layer size.
    pub fn new(config: PolicyConfig, seed: u64) -> Result<Self> {
        config.validate()?;
        if OBS == 0 || HIDDEN == 0 || ACTIONS == 0 {
            return Err(Error::config(
                "categorical policy",
                format!("has layer sizes {OBS}-{HIDDEN}-{ACTIONS}: every size must be at least 1"),
            ));
        }
        let core = PolicyCore::new(config, seed, |dev| {
            let mut net = CategoricalNet::try_build(dev)?;
            net.actor.rescale_output(config.actor_head_scale);
            net.critic.rescale_output(config.critic_head_scale);
            Ok(net)
        })?;
        Ok(Self { core })
    }

    /// A policy for `env`, after checking its spaces ([`Self::check_space`],
    /// [`Self::check_observation_space`]).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`], or as [`Self::new`].
    pub fn for_env<E: Env<Obs = f32, Act = u32>>(
        env: &E,
        config: PolicyConfig,
        seed: u64,
    ) -> Result<Self> {
        Self::check_observation_space(env.observation_space())?;
        Self::check_space(env.action_space())?;
        Self::new(config, seed)
    }

    /// Checks that an environment's action space is discrete with `ACTIONS` actions.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] otherwise.
    pub fn check_space(space: &Space) -> Result<()> {
        match space {
            Space::Discrete { n } if *n as usize == ACTIONS => Ok(()),
            _ => Err(Error::SpaceMismatch {
                what: "action space",
                expected: format!("a discrete space of {ACTIONS} actions"),
                actual: describe(space),
            }),
        }
    }

    /// Checks that an environment's observation space is an `f32` box of `OBS` elements.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] otherwise.
    pub fn check_observation_space(space: &Space) -> Result<()> {
        super::check_box("observation space", space, OBS)
    }

    /// The configuration it was built with (with the current mode).
    pub fn config(&self) -> &PolicyConfig {
        &self.core.config
    }

    /// How `act` chooses actions.
    pub fn mode(&self) -> Mode {
        self.core.config.mode
    }

    /// Switches between sampling and the most likely action.
    pub fn set_mode(&mut self, mode: Mode) {
        self.core.config.mode = mode;
    }

    /// Restarts the sampling generator from `seed` (the weights stay).
    pub fn reseed(&mut self, seed: u64) {
        self.core.reseed(seed);
    }

    /// Writes the log-probabilities of every action, `rows x ACTIONS`, for the `rows`
    /// observations in `obs`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for slices of different row counts.
    pub fn all_log_probs(&self, obs: &[f32], log_probs: &mut [f32]) -> Result<()> {
        let rows = rows_of(obs, OBS)?;
        check_len("log-prob output", rows * ACTIONS, log_probs.len())?;
        if rows > 0 {
            self.log_softmax(self.core.input(obs, rows)?)
                .copy_into(log_probs);
        }
        Ok(())
    }

    fn indices(&self, actions: &[u32]) -> Result<Tensor<(usize,), usize, Cpu>> {
        let mut indices = Vec::with_capacity(actions.len());
        for (row, &action) in actions.iter().enumerate() {
            if action as usize >= ACTIONS {
                return Err(Error::ActionOutOfRange {
                    row,
                    action,
                    actions: ACTIONS,
                });
            }
            indices.push(action as usize);
        }
        Ok(self
            .core
            .dev
            .try_tensor_from_vec(indices, (actions.len(),))?)
    }

    fn log_softmax<T: Tape<f32, Cpu>>(
        &self,
        x: Tensor<(usize, Const<OBS>), f32, Cpu, T>,
    ) -> Tensor<(usize, Const<ACTIONS>), f32, Cpu, T> {
        self.core.net.actor.forward_rows(x).log_softmax::<Axis<1>>()
    }

    fn act_rows(&mut self, obs: &[f32], rows: usize, out: ActOutput<'_, u32>) -> Result<()> {
        check_len("observations", rows * OBS, obs.len())?;
        check_len("action output", rows, out.actions.len())?;
        check_len("log-prob output", rows, out.log_probs.len())?;
        check_len("value output", rows, out.values.len())?;
        if rows == 0 {
            return Ok(());
        }
        let x = self.core.input(obs, rows)?;
        self.core.scratch.resize(rows * ACTIONS, 0.0);
        self.log_softmax(x.clone())
            .copy_into(&mut self.core.scratch);
        let rows_iter = self
            .core
            .scratch
            .chunks_exact(ACTIONS)
            .zip(out.actions.iter_mut())
            .zip(out.log_probs.iter_mut());
        for ((log_probs, action), log_prob) in rows_iter {
            let chosen = match self.core.config.mode {
                Mode::Sample => sample(log_probs, self.core.rng.random::<f32>()),
                Mode::Deterministic => argmax(log_probs),
            };
            *action = chosen as u32;
            *log_prob = log_probs[chosen];
        }
        critic_values(&self.core.net.critic, x).copy_into(out.values);
        Ok(())
    }
}

/// Inverse-CDF draw from `exp(log_probs)` with `u` uniform in `[0, 1)`. If rounding leaves
/// the total below `u`, the last action of nonzero probability.
fn sample(log_probs: &[f32], u: f32) -> usize {
    let mut cumulative = 0.0f32;
    let mut last_possible = 0;
    for (index, &log_prob) in log_probs.iter().enumerate() {
        let p = log_prob.exp();
        if p > 0.0 {
            last_possible = index;
        }
        cumulative += p;
        if u < cumulative {
            return index;
        }
    }
    last_possible
}

/// Index of the largest value (the first among ties).
fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (index, &value) in values.iter().enumerate() {
        if value > values[best] {
            best = index;
        }
    }
    best
}

impl<const OBS: usize, const HIDDEN: usize, const ACTIONS: usize, A: Activation> Policy
    for CategoricalPolicy<OBS, HIDDEN, ACTIONS, A>
{
    type Obs = f32;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        Ok(self.act_rows(obs, states.len(), out)?)
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACTIONS: usize, A: Activation> ValuePolicy
    for CategoricalPolicy<OBS, HIDDEN, ACTIONS, A>
{
    fn values(
        &mut self,
        obs: &[f32],
        states: &[()],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        Ok(self
            .core
            .write_values(&self.core.net.critic, obs, states.len(), values)?)
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACTIONS: usize, A: Activation> ActorCritic
    for CategoricalPolicy<OBS, HIDDEN, ACTIONS, A>
{
    type Net = CategoricalNet<OBS, HIDDEN, ACTIONS, A, f32, Cpu>;

    const OBS_LEN: usize = OBS;
    const ACT_LEN: usize = 1;

    fn stored_actions(actions: Actions<'_>) -> Result<&[u32]> {
        match actions {
            Actions::Discrete(indices) => Ok(indices),
            Actions::Continuous(_) => Err(Error::config(
                "stored actions",
                "are continuous but the policy is categorical: use a GaussianPolicy",
            )),
        }
    }

    delegate_to_core!();

    fn architecture() -> String {
        format!("categorical {OBS}-{HIDDEN}-{HIDDEN}-{ACTIONS} {}", A::NAME)
    }

    fn log_probs_and_values(
        &self,
        obs: &[f32],
        actions: &[u32],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) -> Result<()> {
        let rows = log_probs.len();
        check_rows(rows, OBS, 1, obs, actions, values)?;
        if rows == 0 {
            return Ok(());
        }
        let indices = self.indices(actions)?;
        let x = self.core.input(obs, rows)?;
        self.log_softmax::<NoneTape>(x.clone())
            .select(indices)
            .copy_into(log_probs);
        critic_values(&self.core.net.critic, x).copy_into(values);
        Ok(())
    }

    fn evaluate_traced(
        &self,
        obs: &[f32],
        actions: &[u32],
        grads: Gradients<f32, Cpu>,
    ) -> Result<Evaluation> {
        let rows = actions.len();
        check_len("observations", rows * OBS, obs.len())?;
        let indices = self.indices(actions)?;
        let x = self.core.input(obs, rows)?.traced(grads);
        // The critic's branch starts with an empty tape; the actor's keeps `grads`.
        let values = critic_values(&self.core.net.critic, x.with_empty_tape());
        let log_softmax = self.log_softmax(x);
        // Entropy `-sum(p log p)` from two copies of the log-softmax with empty tapes: its
        // gradient reaches the actor through `log_probs`' tape (see `Evaluation`).
        let probs = log_softmax.with_empty_tape().exp();
        let entropy = (probs * log_softmax.with_empty_tape())
            .sum::<(usize,), Axis<1>>()
            .negate();
        let log_probs = log_softmax.select(indices);
        Ok(Evaluation {
            log_probs,
            entropy,
            values,
        })
    }
}
