//! What [`Ppo`](super::Ppo) and [`RecurrentPpo`](super::RecurrentPpo) share: the
//! preparation of an update (rollout checks, reward scaling, advantages, schedules), the
//! loss of one minibatch with its gradients, the optimiser step, the statistics, and
//! the checkpoint checks, capture and restore over any [`PolicyNetworks`].

use rl_core::{Element, Field, Location, MemoryPlan, Schema, TransitionSchema};
use rl_nn::{Adam, Checkpoint, NetworkState};
use rl_storage::Batch;
use rl_storage::rollout::RolloutBuffer;

use super::{
    Advantages, PpoConfig, PpoState, RewardNormalizer, RewardTransform, UpdateStats,
    clipped_surrogate, value_loss,
};
use crate::error::{Error, Result, adam_difference, first_difference};
use crate::learner::Sizes;
use crate::policy::{PolicyGradients, PolicyNetworks};

/// Rows of a rollout of `config` for `envs` environments, refused as a config error of
/// `ppo.n_steps` beyond what a rollout buffer indexes (`u32::MAX` rows).
pub(super) fn rollout_rows(config: &PpoConfig, envs: usize) -> Result<usize> {
    config
        .n_steps
        .checked_mul(envs)
        .filter(|&rows| u32::try_from(rows).is_ok())
        .ok_or_else(|| {
            Error::config(
                "ppo.n_steps",
                format!(
                    "is {}: with run.n_envs {envs} a rollout would hold more than the {} rows a rollout buffer indexes; lower ppo.n_steps",
                    config.n_steps,
                    u32::MAX
                ),
            )
        })
}

/// The first lines of both PPO learners' plans, and the policy's parameter count: each
/// network's parameters and Adam moments, then the gradients of them all.
pub(super) fn network_lines(
    networks: impl Iterator<Item = (&'static str, usize)>,
) -> Result<(MemoryPlan, usize)> {
    let sizes = Sizes::of("policy.hidden");
    let mut plan = MemoryPlan::new();
    let mut params = 0;
    for (name, n) in networks {
        params = sizes.add(&[params, n])?;
        plan.add(
            format!("ppo/{name}/parameters"),
            Location::Ram,
            sizes.f32s(&[n])?,
        );
        plan.add(
            format!("ppo/{name}/optimizer/adam moments"),
            Location::Ram,
            sizes.f32s(&[2, n])?,
        );
    }
    plan.add(
        "ppo/policy/gradients",
        Location::Ram,
        sizes.f32s(&[params])?,
    );
    Ok((plan, params))
}

/// The lines both PPO learners' plans have after their workspaces: the minibatch of
/// `schema`, the advantages of a rollout of `rows` rows and the scratch rows.
pub(super) fn minibatch_lines(
    plan: &mut MemoryPlan,
    schema: &Schema,
    config: &PpoConfig,
    rows: usize,
) -> Result<()> {
    plan.nest("ppo/minibatch", &Batch::plan(schema, config.batch_size)?);
    plan.nest("ppo", &Advantages::plan(rows));
    plan.add(
        "ppo/scratch_rows",
        Location::Ram,
        Sizes::of("ppo.batch_size").f32s(&[SCRATCH_ROWS, config.batch_size])?,
    );
    Ok(())
}

/// Per-minibatch numbers, summed over an update.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Sums {
    policy_loss: f64,
    value_loss: f64,
    entropy: f64,
    approx_kl: f64,
    clip_fraction: f64,
    grad_norm: f64,
    pub(super) steps: usize,
}

/// Settings of one update, after the schedules.
#[derive(Clone, Copy)]
pub(super) struct StepSettings {
    pub(super) clip: f32,
    pub(super) target_kl: Option<f32>,
}

/// Scratch rows of one minibatch, `batch_size` each, allocated once: old log-probs,
/// normalised advantages, returns, new log-probs, and the loss's gradients with respect
/// to log-probs, entropies and values.
pub(super) struct Scratch {
    pub(super) old_log_probs: Vec<f32>,
    pub(super) advantages: Vec<f32>,
    pub(super) returns: Vec<f32>,
    new_log_probs: Vec<f32>,
    pub(super) d_log_probs: Vec<f32>,
    pub(super) d_entropies: Vec<f32>,
    pub(super) d_values: Vec<f32>,
}

/// Rows of [`Scratch`].
pub(super) const SCRATCH_ROWS: usize = 7;

impl Scratch {
    pub(super) fn new(rows: usize) -> Self {
        Self {
            old_log_probs: vec![0.0; rows],
            advantages: vec![0.0; rows],
            returns: vec![0.0; rows],
            new_log_probs: vec![0.0; rows],
            d_log_probs: vec![0.0; rows],
            d_entropies: vec![0.0; rows],
            d_values: vec![0.0; rows],
        }
    }

    /// Copies the advantages and returns of rollout rows `indices` into the scratch.
    pub(super) fn take_targets(&mut self, advantages: &Advantages, indices: &[u32]) {
        let (all_advantages, all_returns) = (advantages.advantages(), advantages.returns());
        let rows = indices.len();
        let scratch = self.advantages[..rows]
            .iter_mut()
            .zip(&mut self.returns[..rows]);
        for ((advantage, ret), &row) in scratch.zip(indices) {
            *advantage = all_advantages[row as usize];
            *ret = all_returns[row as usize];
        }
    }
}

/// What one minibatch's loss measured.
pub(super) struct Losses {
    policy_loss: f32,
    value_loss: f32,
    entropy: f32,
    kl: f64,
    clipped: usize,
    rows: usize,
}

/// The loss of `rows` rows whose training pass gave `log_probs`, `entropies` and
/// `values` (the old log-probs, advantages and returns in `scratch`, advantages
/// normalised first when configured): the approximate KL and clip fraction before the
/// step, the clipped surrogate, the value loss (clipped around `old_values` when
/// configured) and the entropy bonus, leaving the loss's gradients with respect to
/// log-probs, entropies and values in `scratch`. `Ok(None)`: the target-KL rule stops
/// before this step. Allocates nothing.
pub(super) fn minibatch_loss(
    scratch: &mut Scratch,
    (log_probs, entropies, values): (&[f32], &[f32], &[f32]),
    old_values: Option<&[f32]>,
    config: &PpoConfig,
    settings: StepSettings,
) -> Result<Option<Losses>> {
    let rows = log_probs.len();
    let old = &scratch.old_log_probs[..rows];
    // Diagnostics before the step: approximate KL and clip fraction.
    let new = &mut scratch.new_log_probs[..rows];
    new.copy_from_slice(log_probs);
    let (mut kl, mut clipped) = (0.0f64, 0usize);
    for (&new, &old) in new.iter().zip(old) {
        let log_ratio = f64::from(new - old);
        let ratio = log_ratio.exp();
        kl += (ratio - 1.0) - log_ratio;
        clipped += usize::from((ratio - 1.0).abs() > f64::from(settings.clip));
    }
    let kl = kl / rows as f64;
    if let Some(target) = settings.target_kl
        && kl > 1.5 * f64::from(target)
    {
        return Ok(None);
    }

    let advantages = &scratch.advantages[..rows];
    let d_log_probs = &mut scratch.d_log_probs[..rows];
    let policy_loss = clipped_surrogate(new, old, advantages, settings.clip, d_log_probs)?;
    let d_values = &mut scratch.d_values[..rows];
    let old_values = match (config.clip_range_vf, old_values) {
        (Some(limit), Some(old)) => Some((old, limit)),
        _ => None,
    };
    let returns = &scratch.returns[..rows];
    let value_loss = value_loss(values, returns, old_values, d_values)?;
    let entropy = (entropies.iter().map(|&h| f64::from(h)).sum::<f64>() / rows as f64) as f32;
    for (what, value) in [
        ("policy loss", policy_loss),
        ("value loss", value_loss),
        ("entropy", entropy),
    ] {
        if !value.is_finite() {
            return Err(Error::Diverged { what, value });
        }
    }
    // loss = policy + vf_coef * value - ent_coef * mean(entropy)
    d_values.iter_mut().for_each(|g| *g *= config.vf_coef);
    scratch.d_entropies[..rows].fill(-config.ent_coef / rows as f32);
    Ok(Some(Losses {
        policy_loss,
        value_loss,
        entropy,
        kl,
        clipped,
        rows,
    }))
}

/// Clips the gradients to `max_grad_norm` and steps every network's Adam (split over
/// `pool` when given: bit-identical); returns the norm before clipping. Allocates
/// nothing.
///
/// # Errors
/// [`Error::Diverged`] for a non-finite norm (nothing is stepped).
pub(super) fn apply_gradients<P: PolicyNetworks + ?Sized>(
    policy: &mut P,
    grads: &mut PolicyGradients,
    (adams, pool): (&mut [Adam], Option<&rl_nn::Pool>),
    max_grad_norm: f32,
) -> Result<f32> {
    let norm = grads.clip_norm(max_grad_norm)?;
    if !norm.is_finite() {
        return Err(Error::Diverged {
            what: "gradient norm",
            value: norm,
        });
    }
    for (i, adam) in adams.iter_mut().enumerate() {
        if let (Some(net), Some(grads)) = (policy.network_mut(i), grads.get(i)) {
            match pool {
                Some(pool) => adam.update_on(pool, net.params_mut(), grads)?,
                None => adam.update(net.params_mut(), grads)?,
            }
        }
    }
    Ok(norm)
}

impl Sums {
    /// Adds a step's losses and gradient norm.
    pub(super) fn add(&mut self, losses: &Losses, grad_norm: f32) {
        self.policy_loss += f64::from(losses.policy_loss);
        self.value_loss += f64::from(losses.value_loss);
        self.entropy += f64::from(losses.entropy);
        self.approx_kl += losses.kl;
        self.clip_fraction += losses.clipped as f64 / losses.rows as f64;
        self.grad_norm += f64::from(grad_norm);
        self.steps += 1;
    }

    /// The update's statistics: means over the steps taken.
    pub(super) fn stats(&self, prepared: &Prepared, early_stopped: bool) -> UpdateStats {
        let steps = self.steps.max(1) as f64;
        UpdateStats {
            policy_loss: (self.policy_loss / steps) as f32,
            value_loss: (self.value_loss / steps) as f32,
            entropy: (self.entropy / steps) as f32,
            approx_kl: (self.approx_kl / steps) as f32,
            clip_fraction: (self.clip_fraction / steps) as f32,
            explained_variance: prepared.explained_variance,
            grad_norm: (self.grad_norm / steps) as f32,
            learning_rate: prepared.lr,
            clip_range: prepared.clip,
            minibatches: self.steps,
            early_stopped,
        }
    }
}

/// What [`prepare`] computed.
pub(super) struct Prepared {
    pub(super) explained_variance: f32,
    /// The env-step counter after this rollout.
    pub(super) env_steps: u64,
    pub(super) lr: f64,
    pub(super) clip: f32,
}

/// The learner state [`prepare`] reads and updates.
pub(super) struct UpdateState<'a> {
    pub(super) config: &'a PpoConfig,
    pub(super) envs: usize,
    pub(super) schema: &'a Schema,
    pub(super) reward_normalizer: &'a mut Option<RewardNormalizer>,
    pub(super) advantages: &'a mut Advantages,
    pub(super) adams: &'a mut [Adam],
    pub(super) env_steps: u64,
}

/// Everything before an update's gradient steps: checks that `rollout` is full and of
/// the learner's schema and size, merges its rewards into the reward normaliser when
/// configured, computes the advantages once, the explained variance and the scheduled
/// learning rate (set on every Adam) and clip range.
///
/// # Errors
/// [`Error::Config`] for a rollout of another schema or size or one not full (nothing
/// changes then); storage errors.
pub(super) fn prepare(state: UpdateState<'_>, rollout: &RolloutBuffer) -> Result<Prepared> {
    let config = state.config;
    let expected = (state.schema, config.n_steps, state.envs);
    if (rollout.schema(), rollout.steps(), rollout.envs()) != expected || !rollout.is_full() {
        return Err(Error::config(
            "rollout buffer",
            format!(
                "holds {} of {} steps x {} envs of {:?}, but this PPO trains on full rollouts of {} x {} of {:?}: make it with the learner's rollout_buffer and fill it",
                rollout.len(),
                rollout.steps(),
                rollout.envs(),
                rollout.schema(),
                expected.1,
                expected.2,
                expected.0,
            ),
        ));
    }
    let transform = match (state.reward_normalizer, config.normalize_reward) {
        (Some(normalizer), Some(settings)) => {
            let terminated = rollout.field::<rl_core::Flag>(Field::Terminated)?;
            let truncated = rollout.field::<rl_core::Flag>(Field::Truncated)?;
            normalizer.update(rollout.field(Field::Reward)?, |row| {
                terminated[row].get() || truncated[row].get()
            })?;
            RewardTransform {
                scale: normalizer.scale(),
                clip: settings.clip.unwrap_or(f32::INFINITY),
            }
        }
        _ => RewardTransform::IDENTITY,
    };
    state
        .advantages
        .compute(rollout, config.gamma, config.gae_lambda, transform)?;
    let values = rollout.field::<f32>(Field::Value)?;
    let explained_variance = explained_variance(values, state.advantages.returns());

    let env_steps = state.env_steps + rollout.rows() as u64;
    let (lr, clip) = config.scheduled(env_steps);
    for adam in state.adams.iter_mut() {
        adam.set_lr(lr)?;
    }
    Ok(Prepared {
        explained_variance,
        env_steps,
        lr,
        clip,
    })
}

/// Normalises to zero mean and unit (sample) standard deviation, `+ 1e-8` in the
/// denominator as Stable-Baselines3.
pub(super) fn normalize(values: &mut [f32]) {
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0).max(1.0);
    let scale = 1.0 / (var.sqrt() + 1e-8);
    for v in values {
        *v = ((f64::from(*v) - mean) * scale) as f32;
    }
}

/// `1 - Var(returns - values) / Var(returns)` (NaN-free: 0 when the returns are constant).
pub(super) fn explained_variance(values: &[f32], returns: &[f32]) -> f32 {
    let n = returns.len() as f64;
    if n == 0.0 {
        return 0.0;
    }
    let mean = |it: &mut dyn Iterator<Item = f64>| it.sum::<f64>() / n;
    let mean_r = mean(&mut returns.iter().map(|&r| f64::from(r)));
    let var_r = mean(&mut returns.iter().map(|&r| (f64::from(r) - mean_r).powi(2)));
    let diff = |(&v, &r): (&f32, &f32)| f64::from(r) - f64::from(v);
    let mean_d = mean(&mut values.iter().zip(returns).map(diff));
    let var_d = mean(
        &mut values
            .iter()
            .zip(returns)
            .map(|p| (diff(p) - mean_d).powi(2)),
    );
    if var_r == 0.0 {
        0.0
    } else {
        (1.0 - var_d / var_r) as f32
    }
}

/// The rollout layout of observations of `obs_len` `f32`s and actions of `A` (`act_len`
/// elements; a `u32` index is a scalar).
pub(super) fn rollout_schema<O: Element, A: Element>(
    obs_len: usize,
    act_len: usize,
) -> Result<Schema> {
    let action_shape: &[usize] = if A::DTYPE == rl_core::DType::U32 {
        &[]
    } else {
        &[act_len]
    };
    Ok(
        TransitionSchema::new(O::DTYPE, &[obs_len], A::DTYPE, action_shape)
            .for_rollout()
            .build()?,
    )
}

/// Every network of `policy` with its Adam's state, for a checkpoint.
pub(super) fn capture_networks<'a, P: PolicyNetworks + ?Sized>(
    policy: &'a P,
    adams: &'a [Adam],
) -> Vec<NetworkState<'a>> {
    policy
        .network_names()
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let net = policy.network(i)?;
            Some(NetworkState::capture(*name, net, adams.get(i)))
        })
        .collect()
}

/// Puts a checkpoint's networks, Adam states, sampling generator and observation
/// normaliser into `policy` and `adams`, after checking everything (the architecture,
/// the configuration but its seed against `config`, the normalisers, every network and
/// optimiser state): on error nothing has changed. The caller restores its counters and
/// generators after.
pub(super) fn restore_policy<P, S>(
    policy: &mut P,
    adams: &mut [Adam],
    (config, envs, obs_len): (&PpoConfig, usize, usize),
    checkpoint: &Checkpoint<S>,
    state: &PpoState,
) -> Result<()>
where
    P: PolicyNetworks + ?Sized,
    S: serde::Serialize + serde::de::DeserializeOwned,
{
    let architecture = policy.architecture();
    if state.architecture != architecture {
        return Err(Error::CheckpointMismatch {
            what: "policy architecture".to_owned(),
            expected: architecture.to_string(),
            actual: state.architecture.to_string(),
        });
    }
    config_difference(config, &state.config)?;
    if let Some(normalizer) = &state.obs_normalizer {
        normalizer.check(obs_len)?;
    }
    match (&state.reward_normalizer, config.normalize_reward.is_some()) {
        (Some(normalizer), true) => {
            normalizer.check(envs, f64::from(config.gamma))?;
        }
        (None, false) => {}
        (Some(_), false) | (None, true) => {
            return Err(Error::config(
                "checkpoint reward normalizer",
                "is present without ppo.normalize_reward or missing with it",
            ));
        }
    }
    // Every network and optimiser state is checked before anything is written.
    let names = policy.network_names();
    for (i, name) in names.iter().enumerate() {
        let saved = checkpoint.network(name)?;
        if let Some(net) = policy.network(i) {
            saved.check_fits(net, adams.get(i))?;
        }
    }
    if checkpoint.networks.len() != names.len() {
        return Err(Error::CheckpointMismatch {
            what: "networks".to_owned(),
            expected: format!("{names:?}"),
            actual: format!(
                "{:?}",
                checkpoint
                    .networks
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
            ),
        });
    }
    for (i, name) in names.iter().enumerate() {
        if let Some(net) = policy.network_mut(i) {
            checkpoint
                .network(name)?
                .restore_into(net, adams.get_mut(i))?;
        }
    }
    policy.set_sampling_state(state.sampling_rng.clone());
    // Checked above: cannot fail.
    policy.set_obs_normalizer(state.obs_normalizer.clone())
}

/// Copies every network's weights and the observation normaliser of `source` into
/// `target` (the collector's copy); the sampling generator stays. Allocates nothing
/// beyond the normaliser's copy.
///
/// # Errors
/// [`Error::CheckpointMismatch`] for a target of another architecture; nothing changes
/// then.
pub(super) fn copy_policy<P: PolicyNetworks + ?Sized>(source: &P, target: &mut P) -> Result<()> {
    for i in 0..source.network_names().len() {
        let (Some(from), Some(to)) = (source.network(i), target.network(i)) else {
            continue;
        };
        if from.architecture() != to.architecture() {
            return Err(Error::CheckpointMismatch {
                what: "policy architecture".to_owned(),
                expected: from.architecture().to_string(),
                actual: to.architecture().to_string(),
            });
        }
    }
    target.set_obs_normalizer(source.obs_normalizer().cloned())?;
    for i in 0..source.network_names().len() {
        if let (Some(from), Some(to)) = (source.network(i), target.network_mut(i)) {
            to.params_mut().copy_from_slice(from.params());
        }
    }
    Ok(())
}

/// The first field where the checkpoint's configuration differs from
/// the trainer's, as an error.
fn config_difference(ours: &PpoConfig, theirs: &PpoConfig) -> Result<()> {
    first_difference!(
        PpoConfig,
        "ppo",
        ours,
        theirs,
        [
            n_steps,
            batch_size,
            epochs,
            gamma,
            gae_lambda,
            clip_range,
            clip_range_vf,
            ent_coef,
            vf_coef,
            max_grad_norm,
            target_kl,
            normalize_advantage,
            recompute_old_log_probs,
            eval_minibatch,
            normalize_obs,
            normalize_reward,
        ],
        // The schedules may change on resume: each update sets the rate from them.
        except[adam, learning_rate_end, schedule_steps, clip_range_end]
    )?;
    adam_difference("ppo", &ours.adam, &theirs.adam)
}
