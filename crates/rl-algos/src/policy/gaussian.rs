//! The diagonal Gaussian actor-critic for continuous action spaces.

use std::fmt;

use dfdx::prelude::{
    Axis, BroadcastTo, BuildModule, Const, Cpu, Device, Dtype, Gradients, HasShape, ModuleVisitor,
    NoneTape, Rank0, Rank1, Storage, SumTo, Tape, Tensor, TensorCollection, TensorFromVec,
    TensorOptions, Trace, WithEmptyTape,
};
use rand_distr::{Distribution, StandardNormal};
use rl_collect::{ActOutput, Policy, PolicyError, ValuePolicy};
use rl_core::{Env, Space};
use rl_storage::Actions;

use super::mlp::{Activation, Mlp, Relu};
use super::shared::{PolicyCore, critic_values, delegate_to_core};
use super::{ActorCritic, Evaluation, Mode, PolicyConfig, check_box, check_len, check_rows};
use crate::error::{Error, Result};

/// `ln(2 pi) / 2`.
const HALF_LN_2PI: f32 = 0.918_938_5;

/// The network of a [`GaussianPolicy`]: a mean network `OBS-HIDDEN-HIDDEN-ACT`, a
/// learnable log standard deviation per action dimension that does not depend on the
/// observation, and a separate critic `OBS-HIDDEN-HIDDEN-1`.
///
/// A dfdx [`TensorCollection`] visiting `mean`, `log_std` (reset to 0), then `critic`.
pub struct GaussianNet<
    const OBS: usize,
    const HIDDEN: usize,
    const ACT: usize,
    A,
    E: Dtype,
    D: Storage<E>,
> {
    /// Observation to the mean action.
    pub mean: Mlp<OBS, HIDDEN, ACT, A, E, D>,
    /// Log standard deviation of each action dimension.
    pub log_std: Tensor<Rank1<ACT>, E, D>,
    /// Observation to value.
    pub critic: Mlp<OBS, HIDDEN, 1, A, E, D>,
}

impl<const OBS: usize, const HIDDEN: usize, const ACT: usize, A, E: Dtype, D: Storage<E>> Clone
    for GaussianNet<OBS, HIDDEN, ACT, A, E, D>
{
    fn clone(&self) -> Self {
        Self {
            mean: self.mean.clone(),
            log_std: self.log_std.clone(),
            critic: self.critic.clone(),
        }
    }
}

impl<
    const OBS: usize,
    const HIDDEN: usize,
    const ACT: usize,
    A: Activation,
    E: Dtype,
    D: Storage<E>,
> fmt::Debug for GaussianNet<OBS, HIDDEN, ACT, A, E, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GaussianNet")
            .field("mean", &self.mean)
            .field("log_std", &format_args!("[{ACT}]"))
            .field("critic", &self.critic)
            .finish()
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACT: usize, A: Activation, D: Device<f32>>
    TensorCollection<f32, D> for GaussianNet<OBS, HIDDEN, ACT, A, f32, D>
{
    type To<E2: Dtype, D2: Device<E2>> = GaussianNet<OBS, HIDDEN, ACT, A, E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, f32, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::module("mean", |s| &s.mean, |s| &mut s.mean),
                Self::tensor(
                    "log_std",
                    |s| &s.log_std,
                    |s| &mut s.log_std,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::module("critic", |s| &s.critic, |s| &mut s.critic),
            ),
            |(mean, log_std, critic)| GaussianNet {
                mean,
                log_std,
                critic,
            },
        )
    }
}

/// A diagonal Gaussian policy over `ACT`-dimensional `f32` actions with a value function,
/// for observations of `OBS` `f32` elements.
///
/// - `pi(a | s) = N(mean(s), diag(exp(log_std))^2)`: a mean [`Mlp`]
///   `OBS-HIDDEN-HIDDEN-ACT` and a learnable `log_std` of `ACT` values that does not
///   depend on the observation (initialised to [`PolicyConfig::log_std_init`]); a critic
///   `OBS-HIDDEN-HIDDEN-1`. Activation `A` ([`Relu`] by default), dfdx's initialisation,
///   output layers scaled as [`PolicyConfig`] says.
/// - Log-probs are summed over the action dimensions:
///   `sum_i -((a_i - mean_i) / std_i)^2 / 2 - log_std_i - ln(2 pi) / 2`; the entropy is
///   `sum_i log_std_i + (1 + ln(2 pi)) / 2`.
/// - **Actions are not clipped here.** The sampled action, and its log-prob, are those of
///   the unbounded Gaussian; clipping to the action space happens at the environment
///   boundary (the environments of `rl-envs` clip, as Gymnasium's do, or the caller
///   clips before stepping), so the stored action stays the one whose log-prob PPO's
///   ratio needs.
/// - [`Mode::Sample`] draws `mean + std * N(0, 1)`; [`Mode::Deterministic`] returns the
///   mean (and the log-density there).
/// - Owns its dfdx [`Cpu`] device, seeded with the construction seed, and a separate
///   seeded generator for sampling. Cloning copies both: [`GaussianPolicy::reseed`] a
///   clone so that copies draw different actions.
///
/// ```
/// use rl_algos::{ActorCritic, GaussianPolicy, PolicyConfig};
/// use rl_envs::Pendulum;
///
/// let policy = GaussianPolicy::<3, 64, 1>::for_env(&Pendulum::new(0), PolicyConfig::new(), 7)?;
/// let (mut log_probs, mut values) = ([0.0f32; 1], [0.0f32; 1]);
/// policy.log_probs_and_values(&[1.0, 0.0, 0.0], &[0.0], &mut log_probs, &mut values)?;
/// // Mean near 0 and std 1 at initialisation: about the standard normal's density at 0.
/// assert!((log_probs[0] + 0.918_938_5).abs() < 0.01);
/// # Ok::<(), rl_algos::Error>(())
/// ```
#[derive(Clone)]
pub struct GaussianPolicy<
    const OBS: usize,
    const HIDDEN: usize,
    const ACT: usize,
    A: Activation = Relu,
> {
    /// Its `scratch` holds the `rows x ACT` means of the last `act`.
    core: PolicyCore<GaussianNet<OBS, HIDDEN, ACT, A, f32, Cpu>, OBS>,
}

impl<const OBS: usize, const HIDDEN: usize, const ACT: usize, A: Activation> fmt::Debug
    for GaussianPolicy<OBS, HIDDEN, ACT, A>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug_as("GaussianPolicy", f)
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACT: usize, A: Activation>
    GaussianPolicy<OBS, HIDDEN, ACT, A>
{
    /// A policy whose weights come from a device seeded with `seed`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config` or a zero layer size.
    pub fn new(config: PolicyConfig, seed: u64) -> Result<Self> {
        config.validate()?;
        if OBS == 0 || HIDDEN == 0 || ACT == 0 {
            return Err(Error::config(
                "gaussian policy",
                format!("has layer sizes {OBS}-{HIDDEN}-{ACT}: every size must be at least 1"),
            ));
        }
        let core = PolicyCore::new(config, seed, |dev| {
            let mut net = GaussianNet::try_build(dev)?;
            net.mean.rescale_output(config.actor_head_scale);
            net.critic.rescale_output(config.critic_head_scale);
            net.log_std.copy_from(&[config.log_std_init; ACT]);
            Ok(net)
        })?;
        Ok(Self { core })
    }

    /// A policy for `env`, after checking its spaces ([`Self::check_space`],
    /// [`Self::check_observation_space`]).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`], or as [`Self::new`].
    pub fn for_env<E: Env<Obs = f32, Act = f32>>(
        env: &E,
        config: PolicyConfig,
        seed: u64,
    ) -> Result<Self> {
        Self::check_observation_space(env.observation_space())?;
        Self::check_space(env.action_space())?;
        Self::new(config, seed)
    }

    /// Checks that an environment's action space is an `f32` box of `ACT` elements (its
    /// bounds are not used: actions are clipped at the environment boundary).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] otherwise.
    pub fn check_space(space: &Space) -> Result<()> {
        check_box("action space", space, ACT)
    }

    /// Checks that an environment's observation space is an `f32` box of `OBS` elements.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] otherwise.
    pub fn check_observation_space(space: &Space) -> Result<()> {
        check_box("observation space", space, OBS)
    }

    /// The configuration it was built with (with the current mode).
    pub fn config(&self) -> &PolicyConfig {
        &self.core.config
    }

    /// How `act` chooses actions.
    pub fn mode(&self) -> Mode {
        self.core.config.mode
    }

    /// Switches between sampling and the mean.
    pub fn set_mode(&mut self, mode: Mode) {
        self.core.config.mode = mode;
    }

    /// Restarts the sampling generator from `seed` (the weights stay).
    pub fn reseed(&mut self, seed: u64) {
        self.core.reseed(seed);
    }

    /// The current log standard deviations.
    pub fn log_std(&self) -> [f32; ACT] {
        let mut log_std = [0.0; ACT];
        self.core.net.log_std.copy_into(&mut log_std);
        log_std
    }

    /// Writes the means, `rows x ACT`, for the `rows` observations in `obs`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for slices of different row counts.
    pub fn means(&self, obs: &[f32], means: &mut [f32]) -> Result<()> {
        let rows = super::rows_of(obs, OBS)?;
        check_len("mean output", rows * ACT, means.len())?;
        if rows > 0 {
            self.core
                .net
                .mean
                .forward_rows(self.core.input(obs, rows)?)
                .copy_into(means);
        }
        Ok(())
    }

    fn actions(&self, actions: &[f32]) -> Result<Tensor<(usize, Const<ACT>), f32, Cpu>> {
        Ok(self
            .core
            .dev
            .try_tensor_from_vec(actions.to_vec(), (actions.len() / ACT, Const::<ACT>))?)
    }

    /// `sum_i log_std_i`, broadcast to `rows`, on a tape of its own.
    fn log_std_sum<T: Tape<f32, Cpu>>(&self, rows: usize) -> Tensor<(usize,), f32, Cpu, T> {
        self.core
            .net
            .log_std
            .retaped::<T>()
            .sum::<Rank0, Axis<0>>()
            .broadcast_like::<_, Axis<0>>(&(rows,))
    }

    fn log_probs_of<T: Tape<f32, Cpu>>(
        &self,
        x: Tensor<(usize, Const<OBS>), f32, Cpu, T>,
        actions: Tensor<(usize, Const<ACT>), f32, Cpu>,
    ) -> Tensor<(usize,), f32, Cpu, T> {
        let rows = actions.shape().0;
        let mean = self.core.net.mean.forward_rows(x);
        let inv_std = self
            .core
            .net
            .log_std
            .retaped::<T>()
            .negate()
            .exp()
            .broadcast_like::<_, Axis<0>>(&(rows, Const::<ACT>));
        let squares = ((mean - actions) * inv_std)
            .square()
            .sum::<(usize,), Axis<1>>();
        ((squares * -0.5) - self.log_std_sum::<T>(rows)) - ACT as f32 * HALF_LN_2PI
    }

    fn act_rows(&mut self, obs: &[f32], rows: usize, out: ActOutput<'_, f32>) -> Result<()> {
        check_len("observations", rows * OBS, obs.len())?;
        check_len("action output", rows * ACT, out.actions.len())?;
        check_len("log-prob output", rows, out.log_probs.len())?;
        check_len("value output", rows, out.values.len())?;
        if rows == 0 {
            return Ok(());
        }
        let x = self.core.input(obs, rows)?;
        self.core.scratch.resize(rows * ACT, 0.0);
        self.core
            .net
            .mean
            .forward_rows(x.clone())
            .copy_into(&mut self.core.scratch);
        let log_std = self.log_std();
        // The same operations, in the same order, as `log_probs_of`, so that the log-prob
        // recorded here matches a later evaluation of the stored action.
        let log_std_sum = log_std.iter().fold(0.0f32, |sum, &l| sum + l);
        let rows_iter = self
            .core
            .scratch
            .chunks_exact(ACT)
            .zip(out.actions.chunks_exact_mut(ACT))
            .zip(out.log_probs.iter_mut());
        for ((means, actions), log_prob) in rows_iter {
            let mut squares = 0.0f32;
            for ((&mean, action), &log_std) in means.iter().zip(actions.iter_mut()).zip(&log_std) {
                *action = match self.core.config.mode {
                    Mode::Sample => {
                        let noise: f32 = StandardNormal.sample(&mut self.core.rng);
                        mean + log_std.exp() * noise
                    }
                    Mode::Deterministic => mean,
                };
                let z = (mean - *action) * (-log_std).exp();
                squares += z * z;
            }
            *log_prob = squares * -0.5 - log_std_sum - ACT as f32 * HALF_LN_2PI;
        }
        critic_values(&self.core.net.critic, x).copy_into(out.values);
        Ok(())
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACT: usize, A: Activation> Policy
    for GaussianPolicy<OBS, HIDDEN, ACT, A>
{
    type Obs = f32;
    type Act = f32;
    type State = ();

    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [()],
        out: ActOutput<'_, f32>,
    ) -> Result<(), PolicyError> {
        Ok(self.act_rows(obs, states.len(), out)?)
    }
}

impl<const OBS: usize, const HIDDEN: usize, const ACT: usize, A: Activation> ValuePolicy
    for GaussianPolicy<OBS, HIDDEN, ACT, A>
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

impl<const OBS: usize, const HIDDEN: usize, const ACT: usize, A: Activation> ActorCritic
    for GaussianPolicy<OBS, HIDDEN, ACT, A>
{
    type Net = GaussianNet<OBS, HIDDEN, ACT, A, f32, Cpu>;

    const OBS_LEN: usize = OBS;
    const ACT_LEN: usize = ACT;

    fn stored_actions(actions: Actions<'_>) -> Result<&[f32]> {
        match actions {
            Actions::Continuous(values) => Ok(values),
            Actions::Discrete(_) => Err(Error::config(
                "stored actions",
                "are discrete indices but the policy is Gaussian: use a CategoricalPolicy",
            )),
        }
    }

    delegate_to_core!();

    fn architecture() -> String {
        format!("gaussian {OBS}-{HIDDEN}-{HIDDEN}-{ACT} {}", A::NAME)
    }

    fn log_probs_and_values(
        &self,
        obs: &[f32],
        actions: &[f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) -> Result<()> {
        let rows = log_probs.len();
        check_rows(rows, OBS, ACT, obs, actions, values)?;
        if rows == 0 {
            return Ok(());
        }
        let x = self.core.input(obs, rows)?;
        self.log_probs_of::<NoneTape>(x.clone(), self.actions(actions)?)
            .copy_into(log_probs);
        critic_values(&self.core.net.critic, x).copy_into(values);
        Ok(())
    }

    fn evaluate_traced(
        &self,
        obs: &[f32],
        actions: &[f32],
        grads: Gradients<f32, Cpu>,
    ) -> Result<Evaluation> {
        let rows = actions.len() / ACT;
        check_len("actions", rows * ACT, actions.len())?;
        check_len("observations", rows * OBS, obs.len())?;
        let actions = self.actions(actions)?;
        let x = self.core.input(obs, rows)?.traced(grads);
        let values = critic_values(&self.core.net.critic, x.with_empty_tape());
        let log_probs = self.log_probs_of(x, actions);
        // State-independent: a function of `log_std` only, on a tape of its own.
        let entropy = self.log_std_sum(rows) + ACT as f32 * (0.5 + HALF_LN_2PI);
        Ok(Evaluation {
            log_probs,
            entropy,
            values,
        })
    }
}
