//! The categorical actor-critic for discrete action spaces.

use std::fmt;
use std::marker::PhantomData;

use rand::Rng;
use rl_collect::{ActOutput, Policy, PolicyError, ValuePolicy};
use rl_core::{Env, Space};
use rl_nn::{Observation, Weights};

use super::core::{PolicyCore, PolicyGradients, PolicyWorkspace, policy_networks};
use super::{
    ActorCritic, CoreShape, Mode, PolicyConfig, PolicyKind, PolicyShape, check_len, describe,
    discrete_len, obs_shape, rows_of,
};
use crate::error::{Error, Result};

/// A categorical policy over `actions` discrete actions with a value function, for
/// observations of `obs_len` elements of type `O` (`f32` vectors, or `u8` frames through
/// a convolutional [`Encoder`](super::Encoder)); sizes are chosen at run time.
///
/// - Actor `obs_len -> hidden -> actions` (logits) and critic `obs_len -> hidden -> 1`,
///   separate `rl_nn::Mlp`s (no shared trunk) with the configured activation and
///   initialisation ([`PolicyConfig`]): by default PyTorch's uniform initialisation with
///   the actor's output layer scaled by 0.01, so the first policy is close to uniform.
/// - [`Mode::Sample`] draws from `softmax(logits)` (inverse CDF with a seeded
///   generator); [`Mode::Deterministic`] takes the argmax (the lowest index among ties).
///   Either way the log-prob written is that of the chosen action.
///
/// Cloning copies the weights and the sampling generator's state: reseed a clone with
/// [`CategoricalPolicy::reseed`] so that copies do not draw the same actions.
///
/// ```
/// use rl_algos::policy::{ActorCritic, CategoricalPolicy, PolicyConfig};
/// use rl_envs::CartPole;
///
/// let config = PolicyConfig { hidden: vec![32, 32], ..PolicyConfig::new() };
/// let policy = CategoricalPolicy::for_env(&CartPole::new(0), config, 7)?;
/// let obs = [0.01f32, 0.0, -0.02, 0.0, 0.1, 0.2, 0.0, -0.1];
/// let (mut log_probs, mut values) = ([0.0f32; 2], [0.0f32; 2]);
/// policy.log_probs_and_values(&obs, &[0, 1], &mut log_probs, &mut values)?;
/// assert!(log_probs.iter().all(|lp| (lp - 0.5f32.ln()).abs() < 0.05)); // near uniform
/// # Ok::<(), rl_algos::Error>(())
/// ```
pub struct CategoricalPolicy<O = f32> {
    core: PolicyCore,
    _obs: PhantomData<fn() -> O>,
}

impl<O> Clone for CategoricalPolicy<O> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
            _obs: PhantomData,
        }
    }

    fn clone_from(&mut self, source: &Self) {
        self.core.clone_from(&source.core);
    }
}

impl<O> fmt::Debug for CategoricalPolicy<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.debug_as("CategoricalPolicy", f)
    }
}

impl CategoricalPolicy<f32> {
    /// A policy over `actions` actions for vector observations of `obs_len` elements,
    /// its weights drawn from `seed`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config` or a size of 0.
    pub fn new(obs_len: usize, actions: usize, config: PolicyConfig, seed: u64) -> Result<Self> {
        Self::with_obs_shape(&[obs_len], actions, config, seed)
    }
}

impl<O: Observation> CategoricalPolicy<O> {
    /// A policy over `actions` actions for observations of shape `obs_shape` (an image
    /// for a convolutional encoder), its weights drawn from `seed`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config`, a size of 0 or a shape the encoder
    /// cannot read.
    pub fn with_obs_shape(
        obs_shape: &[usize],
        actions: usize,
        config: PolicyConfig,
        seed: u64,
    ) -> Result<Self> {
        Ok(Self {
            core: PolicyCore::new(obs_shape, is_bytes::<O>(), actions, config, seed, false)?,
            _obs: PhantomData,
        })
    }

    /// A policy for `env`'s spaces (a box of observations, discrete actions).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] for other spaces, or as [`Self::with_obs_shape`].
    pub fn for_env<E: Env<Obs = O, Act = u32>>(
        env: &E,
        config: PolicyConfig,
        seed: u64,
    ) -> Result<Self> {
        let obs = obs_shape(
            env.observation_space(),
            config.encoder,
            super::core::ENCODER_KEY,
        )?;
        let actions = discrete_len(env.action_space())?;
        Self::with_obs_shape(&obs, actions, config, seed)
    }

    /// Checks that an environment's action space is discrete with this policy's number
    /// of actions.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] otherwise.
    pub fn check_space(&self, space: &Space) -> Result<()> {
        match space {
            Space::Discrete { n } if *n as usize == self.actions() => Ok(()),
            _ => Err(Error::SpaceMismatch {
                what: "action space",
                expected: format!("a discrete space of {} actions", self.actions()),
                actual: describe(space),
            }),
        }
    }

    /// Checks that an environment's observation space is a box of `O` elements of this
    /// policy's observation length.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] otherwise.
    pub fn check_observation_space(&self, space: &Space) -> Result<()> {
        super::check_box::<O>("observation space", space, self.core.obs_len)
    }

    /// Number of actions.
    pub fn actions(&self) -> usize {
        self.core.out()
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
    /// [`Error::CheckpointMismatch`] for another architecture; nothing changes then.
    pub fn copy_weights_from(&mut self, other: &Self) -> Result<()> {
        copy_weights(&mut self.core, &other.core)
    }

    /// Writes the log-probabilities of every action, `rows x actions`, for the `rows`
    /// observations in `obs`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for slices of different row counts.
    pub fn all_log_probs(&self, obs: &[O], log_probs: &mut [f32]) -> Result<()> {
        let rows = rows_of(obs, self.core.obs_len)?;
        let n = self.actions();
        check_len("log-prob output", rows * n, log_probs.len())?;
        let mut ws = self.core.workspace(rows);
        self.core.forward(obs, rows, &mut ws)?;
        for (logits, out) in ws
            .actor
            .output()
            .chunks_exact(n)
            .zip(log_probs.chunks_exact_mut(n))
        {
            log_softmax(logits, out);
        }
        Ok(())
    }

    fn check_actions(&self, actions: &[u32]) -> Result<()> {
        check_actions(self.actions(), actions)
    }

    /// Log-softmax of every row into `ws.head`, and the log-probs of `actions` (and
    /// entropies when asked) into `ws`.
    fn head(&self, actions: &[u32], ws: &mut PolicyWorkspace, entropies: bool) {
        head(self.actions(), actions, ws, entropies);
    }

    fn act_rows(&mut self, obs: &[O], rows: usize, out: ActOutput<'_, u32>) -> Result<()> {
        check_len("action output", rows, out.actions.len())?;
        check_len("log-prob output", rows, out.log_probs.len())?;
        check_len("value output", rows, out.values.len())?;
        let mut ws = self.core.take_act_ws(rows);
        let result = self.core.forward(obs, rows, &mut ws);
        if result.is_ok() {
            choose(&mut self.core, &mut ws, out);
        }
        self.core.act_ws = Some(ws);
        result
    }
}

/// Log-softmax of every row of the actor's outputs in `ws` (`n` logits each) into
/// `ws.head`, and the log-probs of `actions` (and entropies when asked) into `ws`.
pub(super) fn head(n: usize, actions: &[u32], ws: &mut PolicyWorkspace, entropies: bool) {
    let rows = ws.rows;
    let PolicyWorkspace {
        actor,
        head,
        log_probs,
        entropies: ent,
        ..
    } = ws;
    let rows_iter = actor
        .output()
        .chunks_exact(n)
        .zip(head.chunks_exact_mut(n))
        .take(rows);
    for (r, (logits, l)) in rows_iter.enumerate() {
        log_softmax(logits, l);
        log_probs[r] = l[actions[r] as usize];
        if entropies {
            ent[r] = -l.iter().map(|&x| x.exp() * x).sum::<f32>();
        }
    }
}

/// Chooses an action for every row of a forward pass through `ws` (sampled or the argmax
/// by `core`'s mode) and writes it with its log-prob and the row's value into `out`.
pub(super) fn choose(core: &mut PolicyCore, ws: &mut PolicyWorkspace, out: ActOutput<'_, u32>) {
    let n = core.out();
    let rows_iter = ws
        .actor
        .output()
        .chunks_exact(n)
        .zip(ws.head.chunks_exact_mut(n))
        .zip(out.actions.iter_mut().zip(out.log_probs.iter_mut()));
    for ((logits, l), (action, log_prob)) in rows_iter {
        log_softmax(logits, l);
        let chosen = match core.config.mode {
            Mode::Sample => sample(l, core.rng.random::<f32>()),
            Mode::Deterministic => argmax(l),
        };
        *action = chosen as u32;
        *log_prob = l[chosen];
    }
    out.values.copy_from_slice(ws.values());
}

/// The gradients of a loss with respect to the logits (into `ws.d_out`) and the values
/// (into `ws.d_value`), given its gradients with respect to each row's log-prob of
/// `actions`, entropy and value, after [`head`] with entropies.
pub(super) fn output_grads(
    n: usize,
    actions: &[u32],
    (d_log_probs, d_entropies, d_values): (&[f32], &[f32], &[f32]),
    ws: &mut PolicyWorkspace,
) {
    let rows = ws.rows;
    let PolicyWorkspace {
        head,
        entropies,
        d_out,
        d_value,
        ..
    } = ws;
    // d l_a / d z_j = [j = a] - p_j;  d H / d z_j = -p_j (l_j + H).
    let rows_iter = head
        .chunks_exact(n)
        .zip(d_out.chunks_exact_mut(n))
        .take(rows);
    for (r, (l, dz)) in rows_iter.enumerate() {
        let (g_lp, g_h, h) = (d_log_probs[r], d_entropies[r], entropies[r]);
        for (j, (d, &lj)) in dz.iter_mut().zip(l).enumerate() {
            let p = lj.exp();
            let onehot = if j == actions[r] as usize { 1.0 } else { 0.0 };
            *d = g_lp * (onehot - p) - g_h * p * (lj + h);
        }
    }
    d_value[..rows].copy_from_slice(d_values);
}

/// `Ok` when every action is below `n`, else [`Error::ActionOutOfRange`] for the first.
pub(super) fn check_actions(n: usize, actions: &[u32]) -> Result<()> {
    match actions.iter().position(|&a| a as usize >= n) {
        Some(row) => Err(Error::ActionOutOfRange {
            row,
            action: actions[row],
            actions: n,
        }),
        None => Ok(()),
    }
}

/// Copies weights and normaliser between two policies of one architecture.
pub(super) fn copy_weights(to: &mut PolicyCore, from: &PolicyCore) -> Result<()> {
    for (ours, theirs) in [(&to.actor, &from.actor), (&to.critic, &from.critic)] {
        if ours.architecture() != theirs.architecture() {
            return Err(Error::CheckpointMismatch {
                what: "policy architecture".to_owned(),
                expected: ours.architecture().to_string(),
                actual: theirs.architecture().to_string(),
            });
        }
    }
    if to.log_std.as_ref().map(Weights::architecture)
        != from.log_std.as_ref().map(Weights::architecture)
    {
        return Err(Error::config(
            "policy copy",
            "mixes a Gaussian and a categorical policy",
        ));
    }
    if to.encoder.as_ref().map(Weights::architecture)
        != from.encoder.as_ref().map(Weights::architecture)
    {
        return Err(Error::CheckpointMismatch {
            what: "policy encoder".to_owned(),
            expected: format!("{:?}", to.encoder.as_ref().map(Weights::architecture)),
            actual: format!("{:?}", from.encoder.as_ref().map(Weights::architecture)),
        });
    }
    to.actor.params_mut().copy_from_slice(from.actor.params());
    to.critic.params_mut().copy_from_slice(from.critic.params());
    if let (Some(a), Some(b)) = (&mut to.encoder, &from.encoder) {
        a.params_mut().copy_from_slice(b.params());
    }
    if let (Some(a), Some(b)) = (&mut to.log_std, &from.log_std) {
        a.params_mut().copy_from_slice(b.params());
    }
    to.obs_norm.clone_from(&from.obs_norm);
    Ok(())
}

/// Whether observations of `O` are frames of bytes (read divided by 255).
fn is_bytes<O: Observation>() -> bool {
    O::DTYPE == rl_core::DType::U8
}

/// `out = logits - logsumexp(logits)`, in `f32` with the maximum subtracted first.
fn log_softmax(logits: &[f32], out: &mut [f32]) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&z| (z - max).exp()).sum();
    let lse = max + sum.ln();
    for (o, &z) in out.iter_mut().zip(logits) {
        *o = z - lse;
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

impl<O: Observation> Policy for CategoricalPolicy<O> {
    type Obs = O;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        obs: &[O],
        states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        Ok(self.act_rows(obs, states.len(), out)?)
    }
}

impl<O: Observation> ValuePolicy for CategoricalPolicy<O> {
    fn values(&mut self, obs: &[O], states: &[()], values: &mut [f32]) -> Result<(), PolicyError> {
        Ok(self.core.write_values(obs, states.len(), values)?)
    }
}

/// The networks of a categorical policy.
const NETWORKS: &[&str] = &["actor", "critic"];

policy_networks!([O] CategoricalPolicy<O>, NETWORKS, PolicyKind::Categorical);

impl<O: Observation> crate::predict::Predict for CategoricalPolicy<O> {
    fn mode(&self) -> Mode {
        self.core.config.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.core.config.mode = mode;
    }
}

impl<O: Observation> ActorCritic for CategoricalPolicy<O> {
    fn shape_for(
        observation_space: &Space,
        action_space: &Space,
        config: &PolicyConfig,
    ) -> Result<PolicyShape> {
        let obs = obs_shape(observation_space, config.encoder, super::core::ENCODER_KEY)?;
        let actions = discrete_len(action_space)?;
        let core = CoreShape::new(&obs, is_bytes::<O>(), actions, config, false)?;
        Ok(PolicyShape::new(core, 1, NETWORKS))
    }

    fn shape(&self) -> PolicyShape {
        PolicyShape::new(self.core.shape.clone(), 1, NETWORKS)
    }

    fn obs_len(&self) -> usize {
        self.core.obs_len
    }

    fn act_len(&self) -> usize {
        1
    }

    fn workspace(&self, max_rows: usize) -> PolicyWorkspace {
        self.core.workspace(max_rows)
    }

    fn evaluate_minibatched(
        &self,
        obs: &[O],
        actions: &[u32],
        log_probs: &mut [f32],
        values: &mut [f32],
        ws: &mut PolicyWorkspace,
    ) -> Result<()> {
        self.check_actions(actions)?;
        self.core
            .evaluate_chunks(obs, actions, 1, (log_probs, values), ws, |a, ws| {
                self.head(a, ws, false);
            })
    }

    fn evaluate(&self, obs: &[O], actions: &[u32], ws: &mut PolicyWorkspace) -> Result<()> {
        check_len("observations", actions.len() * self.core.obs_len, obs.len())?;
        self.check_actions(actions)?;
        self.core.forward(obs, actions.len(), ws)?;
        self.head(actions, ws, true);
        Ok(())
    }

    fn backward(
        &self,
        actions: &[u32],
        d_log_probs: &[f32],
        d_entropies: &[f32],
        d_values: &[f32],
        ws: &mut PolicyWorkspace,
        grads: &mut PolicyGradients,
    ) -> Result<()> {
        let rows = ws.rows;
        for (what, len) in [
            ("actions", actions.len()),
            ("log-prob gradients", d_log_probs.len()),
            ("entropy gradients", d_entropies.len()),
            ("value gradients", d_values.len()),
        ] {
            check_len(what, rows, len)?;
        }
        grads.check(&self.core)?;
        self.check_actions(actions)?;
        output_grads(
            self.actions(),
            actions,
            (d_log_probs, d_entropies, d_values),
            ws,
        );
        self.core.backward_networks(ws, grads)
    }
}
