//! The diagonal Gaussian actor-critic for continuous action spaces.

use std::fmt;

use rand_distr::{Distribution, StandardNormal};
use rl_collect::{ActOutput, Policy, PolicyError, ValuePolicy};
use rl_core::{Env, Space};
use rl_nn::Weights;

use super::categorical::copy_weights;
use super::core::{PolicyCore, PolicyGradients, PolicyWorkspace, policy_networks};
use super::{
    ActorCritic, CoreShape, Mode, PolicyConfig, PolicyKind, PolicyShape, box_len, check_box,
    check_len, rows_of,
};
use crate::error::Result;

/// `ln(2 pi) / 2`.
const HALF_LN_2PI: f32 = 0.918_938_5;

/// A diagonal Gaussian policy over `act_len`-dimensional `f32` actions with a value
/// function, for observations of `obs_len` `f32` elements; sizes are chosen at run time.
///
/// - `pi(a | s) = N(mean(s), diag(exp(log_std))^2)`: a mean network
///   `obs_len -> hidden -> act_len`, a learnable `log_std` of `act_len` values that does
///   not depend on the observation (a network named `"log_std"`, initialised to
///   [`PolicyConfig::log_std_init`]), and a critic `obs_len -> hidden -> 1`.
/// - Log-probs are summed over the action dimensions:
///   `sum_i -((a_i - mean_i) / std_i)^2 / 2 - log_std_i - ln(2 pi) / 2`; the entropy is
///   `sum_i log_std_i + (1 + ln(2 pi)) / 2`.
/// - **Actions are not clipped here.** The sampled action and its log-prob are those of
///   the unbounded Gaussian; clipping to the action space happens at the environment
///   boundary (the environments of `rl-envs` clip, as Gymnasium's do), so the stored
///   action stays the one whose log-prob PPO's ratio needs.
/// - [`Mode::Sample`] draws `mean + std * N(0, 1)`; [`Mode::Deterministic`] returns the
///   mean (and the log-density there).
///
/// ```
/// use rl_algos::policy::{ActorCritic, GaussianPolicy, PolicyConfig};
/// use rl_envs::Pendulum;
///
/// let policy = GaussianPolicy::for_env(&Pendulum::new(0), PolicyConfig::new(), 7)?;
/// let (mut log_probs, mut values) = ([0.0f32; 1], [0.0f32; 1]);
/// policy.log_probs_and_values(&[1.0, 0.0, 0.0], &[0.0], &mut log_probs, &mut values)?;
/// // Mean near 0 and std 1 at initialisation: about the standard normal's density at 0.
/// assert!((log_probs[0] + 0.918_938_5).abs() < 0.01);
/// # Ok::<(), rl_algos::Error>(())
/// ```
#[derive(Clone)]
pub struct GaussianPolicy {
    core: PolicyCore,
}

impl fmt::Debug for GaussianPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug_as("GaussianPolicy", f)
    }
}

impl GaussianPolicy {
    /// A policy over `act_len`-dimensional actions for observations of `obs_len`
    /// elements, its weights drawn from `seed`.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) for an invalid `config` or a size of 0.
    pub fn new(obs_len: usize, act_len: usize, config: PolicyConfig, seed: u64) -> Result<Self> {
        Ok(Self {
            core: PolicyCore::new(&[obs_len], false, act_len, config, seed, true)?,
        })
    }

    /// A policy for `env`'s spaces (`f32` boxes of observations and actions).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`](crate::Error::SpaceMismatch) for other spaces, or as [`Self::new`].
    pub fn for_env<E: Env<Obs = f32, Act = f32>>(
        env: &E,
        config: PolicyConfig,
        seed: u64,
    ) -> Result<Self> {
        let shape = Self::shape_for(env.observation_space(), env.action_space(), &config)?;
        Self::new(shape.obs_len(), shape.act_len(), config, seed)
    }

    /// Checks that an environment's action space is an `f32` box of this policy's action
    /// length.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`](crate::Error::SpaceMismatch) otherwise.
    pub fn check_space(&self, space: &Space) -> Result<()> {
        check_box::<f32>("action space", space, self.core.out())
    }

    /// Checks that an environment's observation space is an `f32` box of this policy's
    /// observation length.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`](crate::Error::SpaceMismatch) otherwise.
    pub fn check_observation_space(&self, space: &Space) -> Result<()> {
        check_box::<f32>("observation space", space, self.core.obs_len)
    }

    /// The configuration it was built with (with the current mode).
    pub fn config(&self) -> &PolicyConfig {
        &self.core.config
    }

    /// Restarts the sampling generator from `seed` (the weights stay).
    pub fn reseed(&mut self, seed: u64) {
        self.core.reseed(seed);
    }

    /// Copies the weights and observation normaliser of `other` (a policy of the same
    /// architecture, such as the learner's) into this one; its sampling generator stays.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`](crate::Error::CheckpointMismatch) for another architecture; nothing changes then.
    pub fn copy_weights_from(&mut self, other: &Self) -> Result<()> {
        copy_weights(&mut self.core, &other.core)
    }

    /// The log standard deviation of each action dimension.
    pub fn log_std(&self) -> &[f32] {
        self.log_std_params()
    }

    fn log_std_params(&self) -> &[f32] {
        self.core.log_std.as_ref().map_or(&[], |p| p.params())
    }

    /// Writes the mean action of each of the `rows` observations in `obs`
    /// (`rows x act_len`).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) for slices of different row counts.
    pub fn means(&self, obs: &[f32], means: &mut [f32]) -> Result<()> {
        let rows = rows_of(obs, self.core.obs_len)?;
        check_len("mean output", rows * self.core.out(), means.len())?;
        let mut ws = self.core.workspace(rows);
        self.core.forward(obs, rows, &mut ws)?;
        means.copy_from_slice(ws.actor.output());
        Ok(())
    }

    fn act_rows(&mut self, obs: &[f32], rows: usize, out: ActOutput<'_, f32>) -> Result<()> {
        let d = self.core.out();
        check_len("action output", rows * d, out.actions.len())?;
        check_len("log-prob output", rows, out.log_probs.len())?;
        check_len("value output", rows, out.values.len())?;
        let mut ws = self.core.take_act_ws(rows);
        let result = self.core.forward(obs, rows, &mut ws);
        if result.is_ok() {
            let log_std = self.core.log_std.as_ref().map_or(&[][..], |p| p.params());
            let rows_iter = ws
                .actor
                .output()
                .chunks_exact(d)
                .zip(out.actions.chunks_exact_mut(d))
                .zip(out.log_probs.iter_mut());
            for ((means, actions), log_prob) in rows_iter {
                for ((action, &mean), &s) in actions.iter_mut().zip(means).zip(log_std) {
                    *action = match self.core.config.mode {
                        Mode::Sample => {
                            let noise: f32 = StandardNormal.sample(&mut self.core.rng);
                            mean + s.exp() * noise
                        }
                        Mode::Deterministic => mean,
                    };
                }
                *log_prob = log_density(means, actions, log_std);
            }
            out.values.copy_from_slice(ws.values());
        }
        self.core.act_ws = Some(ws);
        result
    }

    /// Log-probs (and entropies when asked) of the rows of `actions` into `ws`.
    fn head(&self, actions: &[f32], ws: &mut PolicyWorkspace, entropies: bool) {
        let d = self.core.out();
        let log_std = self.log_std_params();
        let entropy = entropy(log_std);
        let rows = ws.rows;
        let PolicyWorkspace {
            actor,
            log_probs,
            entropies: ent,
            ..
        } = ws;
        let rows_iter = actor
            .output()
            .chunks_exact(d)
            .zip(actions.chunks_exact(d))
            .take(rows);
        for (r, (means, a)) in rows_iter.enumerate() {
            log_probs[r] = log_density(means, a, log_std);
            if entropies {
                ent[r] = entropy;
            }
        }
    }
}

/// `sum_i -z_i^2 / 2 - log_std_i - ln(2 pi) / 2` with `z = (a - mean) exp(-log_std)`: the
/// one formula acting and evaluation both use, so recorded and recomputed log-probs agree.
fn log_density(means: &[f32], actions: &[f32], log_std: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for ((&mean, &a), &s) in means.iter().zip(actions).zip(log_std) {
        let z = (a - mean) * (-s).exp();
        sum += -0.5 * z * z - s - HALF_LN_2PI;
    }
    sum
}

/// `sum_i log_std_i + (1 + ln(2 pi)) / 2`.
fn entropy(log_std: &[f32]) -> f32 {
    log_std.iter().map(|&s| s + 0.5 + HALF_LN_2PI).sum()
}

impl Policy for GaussianPolicy {
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

impl ValuePolicy for GaussianPolicy {
    fn values(
        &mut self,
        obs: &[f32],
        states: &[()],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        Ok(self.core.write_values(obs, states.len(), values)?)
    }
}

/// The networks of a Gaussian policy.
const NETWORKS: &[&str] = &["actor", "critic", "log_std"];

policy_networks!(GaussianPolicy, NETWORKS, PolicyKind::Gaussian);

impl crate::predict::Predict for GaussianPolicy {
    fn mode(&self) -> Mode {
        self.core.config.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.core.config.mode = mode;
    }
}

impl ActorCritic for GaussianPolicy {
    fn shape_for(
        observation_space: &Space,
        action_space: &Space,
        config: &PolicyConfig,
    ) -> Result<PolicyShape> {
        let obs_len = box_len("observation space", observation_space)?;
        let act_len = box_len("action space", action_space)?;
        let core = CoreShape::new(&[obs_len], false, act_len, config, true)?;
        Ok(PolicyShape::new(core, act_len, NETWORKS))
    }

    fn shape(&self) -> PolicyShape {
        PolicyShape::new(self.core.shape.clone(), self.core.out(), NETWORKS)
    }

    fn obs_len(&self) -> usize {
        self.core.obs_len
    }

    fn act_len(&self) -> usize {
        self.core.out()
    }

    fn workspace(&self, max_rows: usize) -> PolicyWorkspace {
        self.core.workspace(max_rows)
    }

    fn evaluate_minibatched(
        &self,
        obs: &[f32],
        actions: &[f32],
        log_probs: &mut [f32],
        values: &mut [f32],
        ws: &mut PolicyWorkspace,
    ) -> Result<()> {
        let d = self.core.out();
        self.core
            .evaluate_chunks(obs, actions, d, (log_probs, values), ws, |a, ws| {
                self.head(a, ws, false);
            })
    }

    fn evaluate(&self, obs: &[f32], actions: &[f32], ws: &mut PolicyWorkspace) -> Result<()> {
        let d = self.core.out();
        let rows = actions.len() / d;
        check_len("actions", rows * d, actions.len())?;
        check_len("observations", rows * self.core.obs_len, obs.len())?;
        self.core.forward(obs, rows, ws)?;
        self.head(actions, ws, true);
        Ok(())
    }

    fn backward(
        &self,
        actions: &[f32],
        d_log_probs: &[f32],
        d_entropies: &[f32],
        d_values: &[f32],
        ws: &mut PolicyWorkspace,
        grads: &mut PolicyGradients,
    ) -> Result<()> {
        let (rows, d) = (ws.rows, self.core.out());
        check_len("actions", rows * d, actions.len())?;
        for (what, len) in [
            ("log-prob gradients", d_log_probs.len()),
            ("entropy gradients", d_entropies.len()),
            ("value gradients", d_values.len()),
        ] {
            check_len(what, rows, len)?;
        }
        grads.check(&self.core)?;
        let log_std = self.log_std_params();
        check_len("log-std gradients", d, grads.get(2).map_or(0, <[f32]>::len))?;
        // With z = (a - mean) exp(-s): d lp / d mean = z exp(-s), d lp / d s = z^2 - 1,
        // d H / d s = 1.
        {
            let PolicyWorkspace { actor, d_out, .. } = &mut *ws;
            let rows_iter = actor
                .output()
                .chunks_exact(d)
                .zip(actions.chunks_exact(d))
                .zip(d_out.chunks_exact_mut(d))
                .take(rows);
            let d_log_std = grads
                .buffer_mut(2)
                .map_or(&mut [][..], |b| b.as_mut_slice());
            for (r, ((means, a), dm)) in rows_iter.enumerate() {
                let (g_lp, g_h) = (d_log_probs[r], d_entropies[r]);
                for i in 0..d {
                    let inv_std = (-log_std[i]).exp();
                    let z = (a[i] - means[i]) * inv_std;
                    dm[i] = g_lp * z * inv_std;
                    d_log_std[i] += g_lp * (z * z - 1.0) + g_h;
                }
            }
        }
        ws.d_value[..rows].copy_from_slice(d_values);
        self.core.backward_networks(ws, grads)
    }
}
