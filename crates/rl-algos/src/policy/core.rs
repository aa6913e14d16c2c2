//! What [`CategoricalPolicy`](super::CategoricalPolicy) and
//! [`GaussianPolicy`](super::GaussianPolicy) hold in common: the actor and critic on
//! `rl-nn`, the sampling generator, the configuration, the observation normaliser, and
//! the workspace and gradient buffers their passes run through.

use std::fmt;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Location, MemoryPlan};
use rl_nn::{
    MlpSpec, Module, Network, NetworkSpec, NetworkWorkspace, Observation, Parameters, Weights,
};

use super::{ObsNormalizer, PolicyConfig, PolicyInit, PolicyNetworks, check_len};
use crate::error::{Error, Result};
use crate::learner::Sizes;

/// The setting that names a policy's encoder.
pub(crate) const ENCODER_KEY: &str = "policy.encoder";

/// Offsets the sampling generator's seed from the initialisation's, keeping the two
/// streams apart.
const SAMPLING_SEED_OFFSET: u64 = 0x9E37_79B9_7F4A_7C15;

/// The networks of a [`PolicyCore`] by size alone: an actor `input -> hidden -> out`, a
/// critic `input -> hidden -> 1` and, for a Gaussian policy, `out` log standard
/// deviations. What plans read before the networks exist; a core is built from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CoreShape {
    /// Elements of one input row (observations, or a summarizer's features).
    pub(crate) input: usize,
    /// Actor outputs per row.
    pub(crate) out: usize,
    pub(crate) actor: NetworkSpec,
    pub(crate) critic: NetworkSpec,
    /// The torso the actor and critic heads share (a convolutional encoder's), whose
    /// outputs are the heads' inputs.
    pub(crate) encoder: Option<NetworkSpec>,
    /// Parameters of the actor, the critic and the log standard deviations or the
    /// shared encoder (0 without).
    params: [usize; 3],
}

impl CoreShape {
    /// The shape of a core reading rows of shape `shape` (`[len]` for vectors, an image
    /// for a convolutional encoder) with `out` actor outputs, shaped by `config`, with
    /// `out` log standard deviations when `log_std`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config`, a size of 0, a shape the encoder cannot
    /// read, or sizes whose parameters overflow.
    pub(crate) fn new(
        shape: &[usize],
        bytes: bool,
        out: usize,
        config: &PolicyConfig,
        log_std: bool,
    ) -> Result<Self> {
        config.validate()?;
        let input = shape.iter().product::<usize>();
        if input == 0 || out == 0 {
            return Err(Error::config(
                "policy sizes",
                format!(
                    "are {input} observation elements and {out} actor outputs: both must be at least 1"
                ),
            ));
        }
        let act = config.activation;
        let encoder = config
            .encoder
            .torso(ENCODER_KEY, shape, bytes, &config.hidden, act)?;
        let (actor, critic) = match &encoder {
            None => (
                NetworkSpec::Mlp(MlpSpec::new(input, &config.hidden, out, act)),
                NetworkSpec::Mlp(MlpSpec::new(input, &config.hidden, 1, act)),
            ),
            // Linear heads on the torso's features (its last hidden layer).
            Some(_) => {
                let features = config.hidden.last().copied().unwrap_or(input);
                (
                    NetworkSpec::Mlp(MlpSpec::new(features, &[], out, act)),
                    NetworkSpec::Mlp(MlpSpec::new(features, &[], 1, act)),
                )
            }
        };
        let sizes = Sizes::of("policy.hidden");
        let params = [
            sizes.checked(actor.checked_num_params())?,
            sizes.checked(critic.checked_num_params())?,
            match &encoder {
                Some(spec) => sizes.checked(spec.checked_num_params())?,
                None if log_std => out,
                None => 0,
            },
        ];
        sizes.add(&params)?;
        Ok(Self {
            input,
            out,
            actor,
            critic,
            encoder,
            params,
        })
    }

    /// Elements per row of the workspace's normalised observations: the input of an
    /// mlp (which may normalise), none for a convolutional encoder (which reads the
    /// observations in place).
    pub(crate) fn normalized_input(&self) -> usize {
        match (&self.encoder, &self.actor) {
            (None, NetworkSpec::Mlp(_)) => self.input,
            _ => 0,
        }
    }

    /// Elements of the shared encoder's output row (0 without one).
    pub(crate) fn features(&self) -> usize {
        match &self.encoder {
            Some(_) => self.actor.input_len(),
            None => 0,
        }
    }

    /// The network names of a policy whose own are `names` (actor, critic and maybe
    /// log-std): with a shared encoder, `actor`, `critic`, `encoder`.
    pub(crate) fn names(&self, names: &'static [&'static str]) -> &'static [&'static str] {
        match self.encoder {
            Some(_) => &["actor", "critic", "encoder"],
            None => names,
        }
    }

    /// Parameters of the networks in order (actor, critic and, with log standard
    /// deviations, `log_std`).
    pub(crate) fn params(&self) -> &[usize] {
        match self.params {
            [_, _, 0] => &self.params[..2],
            _ => &self.params,
        }
    }

    /// Bytes of [`PolicyCore::workspace`] for `max_rows` rows (at least 1): the inputs,
    /// the actor's and critic's activations, per-row outputs and gradients. An overflow
    /// is `sizes`' error (the setting the rows come from).
    pub(crate) fn workspace_bytes(&self, max_rows: usize, sizes: Sizes) -> Result<u64> {
        let rows = max_rows.max(1);
        let per_row = sizes.add(&[
            self.normalized_input(),
            2 * self.out,
            4,
            2 * self.features(),
        ])?;
        let encoder = match &self.encoder {
            Some(spec) => sizes.checked(spec.workspace_bytes(rows))?,
            None => 0,
        };
        sizes.sum(&[
            sizes.f32s(&[rows, per_row])?,
            sizes.checked(self.actor.workspace_bytes(rows))?,
            sizes.checked(self.critic.workspace_bytes(rows))?,
            encoder,
        ])
    }
}

/// The networks and state of a policy with `out` actor outputs per row.
#[derive(Clone)]
pub(super) struct PolicyCore {
    pub(super) shape: CoreShape,
    pub(super) obs_len: usize,
    pub(super) actor: Network,
    pub(super) critic: Network,
    /// The torso the heads share (a convolutional encoder), read before them.
    pub(super) encoder: Option<Network>,
    /// A Gaussian policy's log standard deviations.
    pub(super) log_std: Option<Parameters>,
    pub(super) rng: Xoshiro256PlusPlus,
    pub(super) config: PolicyConfig,
    pub(super) obs_norm: Option<ObsNormalizer>,
    /// Acting's workspace, grown to the largest batch acted on.
    pub(super) act_ws: Option<PolicyWorkspace>,
    /// The threads acting's passes are split across (`None`: the calling thread).
    pub(super) pool: Option<std::sync::Arc<rl_nn::Pool>>,
}

impl PolicyCore {
    /// Networks `obs -> hidden -> out` and `obs -> hidden -> 1` for observations of
    /// `obs_shape` (through `config`'s encoder), initialised from `seed`, with a separate
    /// sampling generator.
    pub(super) fn new(
        obs_shape: &[usize],
        bytes: bool,
        out: usize,
        config: PolicyConfig,
        seed: u64,
        log_std: bool,
    ) -> Result<Self> {
        let shape = CoreShape::new(obs_shape, bytes, out, &config, log_std)?;
        let obs_len = shape.input;
        let mut init_rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        // The shared torso first (every layer hidden: gain sqrt(2) when orthogonal).
        let encoder = match &shape.encoder {
            Some(spec) => Some(Network::new(
                spec.clone(),
                config.init_of(std::f32::consts::SQRT_2),
                &mut init_rng,
            )?),
            None => None,
        };
        let mut build = |spec: &NetworkSpec, head: f32| -> Result<Network> {
            let mut net = Network::new(spec.clone(), config.init_of(head), &mut init_rng)?;
            if config.init == PolicyInit::ScaledUniform {
                net.scale_output_layer(head);
            }
            Ok(net)
        };
        let actor = build(&shape.actor, config.actor_head_scale)?;
        let critic = build(&shape.critic, config.critic_head_scale)?;
        let log_std = if log_std {
            Some(Parameters::filled(vec![out], config.log_std_init)?)
        } else {
            None
        };
        Ok(Self {
            shape,
            obs_len,
            actor,
            critic,
            encoder,
            log_std,
            rng: sampling_rng(seed),
            config,
            obs_norm: None,
            act_ws: None,
            pool: None,
        })
    }

    pub(super) fn reseed(&mut self, seed: u64) {
        self.rng = sampling_rng(seed);
    }

    /// Actor outputs per row.
    pub(super) fn out(&self) -> usize {
        self.actor.output_dim()
    }

    pub(super) fn debug_as(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field("actor", &self.actor.architecture())
            .field("critic", &self.critic.architecture())
            .field("encoder", &self.encoder.as_ref().map(Weights::architecture))
            .field("config", &self.config)
            .finish_non_exhaustive()
    }

    pub(super) fn set_obs_normalizer(&mut self, normalizer: Option<ObsNormalizer>) -> Result<()> {
        if let Some(n) = &normalizer {
            if self.shape.normalized_input() == 0 {
                return Err(Error::config(
                    "observation normalisation",
                    "applies to vector observations (policy.encoder = \"mlp\"): a convolutional encoder reads frames as they are",
                ));
            }
            n.check(self.obs_len)?;
        }
        self.obs_norm = normalizer;
        Ok(())
    }

    pub(super) fn workspace(&self, max_rows: usize) -> PolicyWorkspace {
        let max_rows = max_rows.max(1);
        let out = self.out();
        PolicyWorkspace {
            obs_len: self.obs_len,
            out,
            max_rows,
            rows: 0,
            input: vec![0.0; max_rows * self.shape.normalized_input()],
            actor: self.actor.workspace(max_rows),
            critic: self.critic.workspace(max_rows),
            encoder: self.encoder.as_ref().map(|e| e.workspace(max_rows)),
            d_features: vec![0.0; 2 * max_rows * self.shape.features()],
            head: vec![0.0; max_rows * out],
            log_probs: vec![0.0; max_rows],
            entropies: vec![0.0; max_rows],
            values: vec![0.0; max_rows],
            d_out: vec![0.0; max_rows * out],
            d_value: vec![0.0; max_rows],
        }
    }

    /// Takes `rows` observations into `ws` (normalised if the policy normalises) and runs
    /// the actor and the critic on them: the actor's outputs are then
    /// `ws.actor.output()`, the values `ws.values`.
    pub(super) fn forward<O: Observation>(
        &self,
        obs: &[O],
        rows: usize,
        ws: &mut PolicyWorkspace,
    ) -> Result<()> {
        if ws.obs_len != self.obs_len || ws.out != self.out() {
            return Err(Error::config(
                "policy workspace",
                format!(
                    "was made for {} observation elements and {} actor outputs but the policy has {} and {}: make it with the policy's workspace()",
                    ws.obs_len,
                    ws.out,
                    self.obs_len,
                    self.out()
                ),
            ));
        }
        if rows > ws.max_rows {
            return Err(Error::shape(
                "batch rows (at most the workspace's max_rows)",
                ws.max_rows,
                rows,
            ));
        }
        check_len("observations", rows * self.obs_len, obs.len())?;
        ws.rows = rows;
        let values = match (&self.encoder, &self.obs_norm, O::as_f32(obs)) {
            (Some(encoder), _, _) => {
                let PolicyWorkspace {
                    encoder: Some(encoder_ws),
                    actor,
                    critic,
                    ..
                } = ws
                else {
                    return Err(foreign_workspace());
                };
                let features = encoder.forward_obs(obs, rows, encoder_ws)?;
                self.actor.forward(features, rows, actor)?;
                self.critic.forward(features, rows, critic)?
            }
            (None, Some(normalizer), Some(obs)) => {
                let input = &mut ws.input[..obs.len()];
                normalizer.normalize_to(obs, input);
                self.actor.forward(input, rows, &mut ws.actor)?;
                self.critic.forward(input, rows, &mut ws.critic)?
            }
            _ => {
                self.actor.forward_obs(obs, rows, &mut ws.actor)?;
                self.critic.forward_obs(obs, rows, &mut ws.critic)?
            }
        };
        ws.values[..rows].copy_from_slice(values);
        Ok(())
    }

    /// Log-probs and values (the two outputs) of `rows = log_probs.len()` stored actions
    /// (`act_len` elements each), `ws.max_rows()` rows at a time: a forward pass, then `head` writes
    /// each chunk's log-probs into `ws` (the caller has checked the actions' values).
    pub(super) fn evaluate_chunks<O: Observation, A>(
        &self,
        obs: &[O],
        actions: &[A],
        act_len: usize,
        (log_probs, values): (&mut [f32], &mut [f32]),
        ws: &mut PolicyWorkspace,
        head: impl Fn(&[A], &mut PolicyWorkspace),
    ) -> Result<()> {
        super::check_rows(log_probs.len(), self.obs_len, act_len, obs, actions, values)?;
        let mb = ws.max_rows;
        let chunks = obs
            .chunks(mb * self.obs_len)
            .zip(actions.chunks(mb * act_len))
            .zip(log_probs.chunks_mut(mb).zip(values.chunks_mut(mb)));
        for ((obs, actions), (log_probs, values)) in chunks {
            self.forward(obs, log_probs.len(), ws)?;
            head(actions, ws);
            log_probs.copy_from_slice(ws.log_probs());
            values.copy_from_slice(ws.values());
        }
        Ok(())
    }

    /// The acting workspace, grown to hold `rows` rows (on the acting pool).
    pub(super) fn take_act_ws(&mut self, rows: usize) -> PolicyWorkspace {
        match self.act_ws.take() {
            Some(ws) if ws.max_rows >= rows && ws.out == self.out() => ws,
            _ => {
                let mut ws = self.workspace(rows);
                ws.set_pool(self.pool.clone());
                ws
            }
        }
    }

    /// Runs acting's passes on `pool` (`None`: on the calling thread); bit-identical
    /// whatever its size.
    pub(super) fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        if let Some(ws) = &mut self.act_ws {
            ws.set_pool(pool.clone());
        }
        self.pool = pool;
    }

    /// `V(s)` of `rows` observations (`ValuePolicy::values`).
    pub(super) fn write_values<O: Observation>(
        &mut self,
        obs: &[O],
        rows: usize,
        values: &mut [f32],
    ) -> Result<()> {
        check_len("value output", rows, values.len())?;
        let mut ws = self.take_act_ws(rows);
        let result = self.forward(obs, rows, &mut ws);
        if result.is_ok() {
            values.copy_from_slice(&ws.values[..rows]);
        }
        self.act_ws = Some(ws);
        result
    }

    /// Backpropagates `ws.d_out` (actor outputs) and `ws.d_value` into the actor's and
    /// critic's gradient buffers (checked by the caller with [`PolicyGradients::check`]).
    pub(super) fn backward_networks(
        &self,
        ws: &mut PolicyWorkspace,
        grads: &mut PolicyGradients,
    ) -> Result<()> {
        self.backward_heads(ws, grads, None)
    }

    /// As [`PolicyCore::backward_networks`], also writing the gradients with respect to
    /// the inputs through the actor and through the critic into `d_inputs` (`rows x
    /// obs_len` each, overwritten) when given. The gradient buffers are the first two of
    /// `grads` (the caller checks them).
    pub(super) fn backward_heads(
        &self,
        ws: &mut PolicyWorkspace,
        grads: &mut PolicyGradients,
        d_inputs: Option<(&mut [f32], &mut [f32])>,
    ) -> Result<()> {
        let rows = ws.rows;
        if let Some(encoder) = &self.encoder {
            if d_inputs.is_some() {
                return Err(Error::config(
                    "policy backward",
                    "a shared encoder gives no input gradients: a history summarizer reads vectors",
                ));
            }
            let f = rows * self.shape.features();
            let [actor, critic, encoder_grads] = grads.buffers.as_mut_slice() else {
                return Err(Error::shape(
                    "gradient buffers (one per network)",
                    3,
                    grads.buffers.len(),
                ));
            };
            let half = ws.d_features.len() / 2;
            let (d_actor, d_critic) = ws.d_features.split_at_mut(half);
            self.actor.backward(
                &mut ws.actor,
                &ws.d_out[..rows * ws.out],
                Some(actor),
                Some(&mut d_actor[..f]),
            )?;
            self.critic.backward(
                &mut ws.critic,
                &ws.d_value[..rows],
                Some(critic),
                Some(&mut d_critic[..f]),
            )?;
            for (a, c) in d_actor[..f].iter_mut().zip(&d_critic[..f]) {
                *a += c;
            }
            let Some(encoder_ws) = ws.encoder.as_mut() else {
                return Err(foreign_workspace());
            };
            return Ok(encoder.backward(encoder_ws, &d_actor[..f], Some(encoder_grads), None)?);
        }
        let n = rows * self.obs_len;
        let (d_actor, d_critic) = match d_inputs {
            Some((a, c)) => (Some(&mut a[..n]), Some(&mut c[..n])),
            None => (None, None),
        };
        let (actor, critic) = grads.buffers.split_at_mut(1);
        self.actor.backward(
            &mut ws.actor,
            &ws.d_out[..rows * ws.out],
            Some(&mut actor[0]),
            d_actor,
        )?;
        self.critic.backward(
            &mut ws.critic,
            &ws.d_value[..rows],
            Some(&mut critic[0]),
            d_critic,
        )?;
        Ok(())
    }

    /// The architecture: `kind` and every network's.
    pub(super) fn architecture(&self, kind: super::PolicyKind) -> super::PolicyArchitecture {
        let mut networks = vec![
            ("actor".to_owned(), self.actor.architecture()),
            ("critic".to_owned(), self.critic.architecture()),
        ];
        if let Some(log_std) = &self.log_std {
            networks.push(("log_std".to_owned(), log_std.architecture()));
        }
        if let Some(encoder) = &self.encoder {
            networks.push(("encoder".to_owned(), encoder.architecture()));
        }
        super::PolicyArchitecture { kind, networks }
    }

    /// The networks in order: actor, critic, log-std.
    pub(super) fn network(&self, index: usize) -> Option<&dyn Weights> {
        match index {
            0 => Some(&self.actor),
            1 => Some(&self.critic),
            2 => match (&self.log_std, &self.encoder) {
                (Some(p), _) => Some(p as &dyn Weights),
                (None, Some(e)) => Some(e as &dyn Weights),
                (None, None) => None,
            },
            _ => None,
        }
    }

    pub(super) fn network_mut(&mut self, index: usize) -> Option<&mut dyn Weights> {
        match index {
            0 => Some(&mut self.actor),
            1 => Some(&mut self.critic),
            2 => match (&mut self.log_std, &mut self.encoder) {
                (Some(p), _) => Some(p as &mut dyn Weights),
                (None, Some(e)) => Some(e as &mut dyn Weights),
                (None, None) => None,
            },
            _ => None,
        }
    }
}

/// A workspace made for a policy without the shared encoder this one has.
fn foreign_workspace() -> Error {
    Error::config(
        "policy workspace",
        "was made for a policy of another architecture: make it with the policy's workspace()",
    )
}

fn sampling_rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed.wrapping_add(SAMPLING_SEED_OFFSET))
}

/// Everything a policy's passes over up to `max_rows` rows need, allocated once
/// ([`ActorCritic::workspace`](super::ActorCritic::workspace)): the (normalised) inputs,
/// the actor's and critic's activations, and per-row outputs and gradients.
#[derive(Clone, Debug)]
pub struct PolicyWorkspace {
    obs_len: usize,
    out: usize,
    max_rows: usize,
    pub(super) rows: usize,
    input: Vec<f32>,
    pub(super) actor: NetworkWorkspace,
    critic: NetworkWorkspace,
    encoder: Option<NetworkWorkspace>,
    /// Gradients with respect to the shared encoder's outputs through the actor, then
    /// through the critic (`2 x max_rows x features`; empty without an encoder).
    d_features: Vec<f32>,
    /// Per actor output: the log-softmax (categorical).
    pub(super) head: Vec<f32>,
    pub(super) log_probs: Vec<f32>,
    pub(super) entropies: Vec<f32>,
    values: Vec<f32>,
    /// Gradients with respect to the actor's outputs and the values.
    pub(super) d_out: Vec<f32>,
    pub(super) d_value: Vec<f32>,
}

impl PolicyWorkspace {
    /// The actor's and critic's passes run on `pool` (`None`: on the calling thread);
    /// results are bit-identical whatever its size.
    pub fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        self.actor.set_pool(pool.clone());
        if let Some(encoder) = &mut self.encoder {
            encoder.set_pool(pool.clone());
        }
        self.critic.set_pool(pool);
    }

    /// The pool the passes run on, if any.
    pub fn pool(&self) -> Option<&std::sync::Arc<rl_nn::Pool>> {
        self.actor.pool()
    }

    /// Largest batch.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Rows of the last pass.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Log-probabilities of the last [`evaluate`](super::ActorCritic::evaluate).
    pub fn log_probs(&self) -> &[f32] {
        &self.log_probs[..self.rows]
    }

    /// Entropies of the last [`evaluate`](super::ActorCritic::evaluate).
    pub fn entropies(&self) -> &[f32] {
        &self.entropies[..self.rows]
    }

    /// Values of the last pass.
    pub fn values(&self) -> &[f32] {
        &self.values[..self.rows]
    }

    /// Bytes held by the workspace's buffers.
    pub fn memory_bytes(&self) -> u64 {
        let floats = self.input.len()
            + self.head.len()
            + self.log_probs.len()
            + self.entropies.len()
            + self.values.len()
            + self.d_out.len()
            + self.d_value.len()
            + self.d_features.len();
        (floats * size_of::<f32>()) as u64
            + self.actor.memory_bytes()
            + self.critic.memory_bytes()
            + self
                .encoder
                .as_ref()
                .map_or(0, NetworkWorkspace::memory_bytes)
    }
}

/// One gradient buffer per network of a policy, in
/// [`PolicyNetworks::network_names`]' order, allocated once and reused by every step.
#[derive(Clone, Debug)]
pub struct PolicyGradients {
    buffers: Vec<Vec<f32>>,
}

impl PolicyGradients {
    /// Zero gradients for every network of `policy`.
    pub fn new<P: PolicyNetworks + ?Sized>(policy: &P) -> Self {
        let buffers = (0..policy.network_names().len())
            .filter_map(|i| policy.network(i).map(|n| vec![0.0; n.num_params()]))
            .collect();
        Self { buffers }
    }

    /// Sets every gradient to 0.
    pub fn zero(&mut self) {
        self.buffers.iter_mut().for_each(|b| b.fill(0.0));
    }

    /// The buffer of network `index`.
    pub fn get(&self, index: usize) -> Option<&[f32]> {
        self.buffers.get(index).map(Vec::as_slice)
    }

    /// Number of buffers (networks).
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Whether there is no buffer.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Bytes held.
    pub fn memory_plan(&self, name: &str) -> MemoryPlan {
        let floats: usize = self.buffers.iter().map(Vec::len).sum();
        MemoryPlan::new().with(
            format!("{name}/gradients"),
            Location::Ram,
            (floats * size_of::<f32>()) as u64,
        )
    }

    /// Scales every buffer so that the global L2 norm over all of them is at most
    /// `max_norm` (`rl_nn::clip_grad_norm`), returning the norm before. Allocates nothing.
    ///
    /// # Errors
    /// As `rl_nn::clip_grad_norm`.
    pub fn clip_norm(&mut self, max_norm: f32) -> Result<f32> {
        let norm = match self.buffers.as_mut_slice() {
            [a] => rl_nn::clip_grad_norm(&mut [a], max_norm),
            [a, b] => rl_nn::clip_grad_norm(&mut [a, b], max_norm),
            [a, b, c] => rl_nn::clip_grad_norm(&mut [a, b, c], max_norm),
            _ => {
                let mut all: Vec<&mut [f32]> =
                    self.buffers.iter_mut().map(Vec::as_mut_slice).collect();
                rl_nn::clip_grad_norm(&mut all, max_norm)
            }
        }?;
        Ok(norm)
    }

    /// Buffer `index`, mutably, for the policies' backward passes.
    pub(super) fn buffer_mut(&mut self, index: usize) -> Option<&mut Vec<f32>> {
        self.buffers.get_mut(index)
    }

    /// Checks that the buffers fit `core`'s networks.
    pub(super) fn check(&self, core: &PolicyCore) -> Result<()> {
        let networks = 2 + usize::from(core.log_std.is_some() || core.encoder.is_some());
        check_len(
            "gradient buffers (one per network)",
            networks,
            self.buffers.len(),
        )?;
        for (i, buffer) in self.buffers.iter().enumerate() {
            let expected = core.network(i).map_or(0, |n| n.num_params());
            check_len("network gradients", expected, buffer.len())?;
        }
        Ok(())
    }
}

/// Implements [`PolicyNetworks`] for a policy type whose `core` field is a
/// [`PolicyCore`], with its network names and kind.
macro_rules! policy_networks {
    ($policy:ident, $names:expr, $kind:expr) => {
        policy_networks!([] $policy, $names, $kind);
    };
    ([$($generics:tt)*] $policy:ty, $names:expr, $kind:expr) => {
        impl<$($generics)*> $crate::policy::PolicyNetworks for $policy {
            fn network_names(&self) -> &'static [&'static str] {
                self.core.shape.names($names)
            }

            fn network(&self, index: usize) -> Option<&dyn rl_nn::Weights> {
                self.core.network(index)
            }

            fn network_mut(&mut self, index: usize) -> Option<&mut dyn rl_nn::Weights> {
                self.core.network_mut(index)
            }

            fn architecture(&self) -> $crate::policy::PolicyArchitecture {
                self.core.architecture($kind)
            }

            fn sampling_state(&self) -> rand_xoshiro::Xoshiro256PlusPlus {
                self.core.rng.clone()
            }

            fn set_sampling_state(&mut self, state: rand_xoshiro::Xoshiro256PlusPlus) {
                self.core.rng = state;
            }

            fn obs_normalizer(&self) -> Option<&$crate::policy::ObsNormalizer> {
                self.core.obs_norm.as_ref()
            }

            fn obs_normalizer_mut(&mut self) -> Option<&mut $crate::policy::ObsNormalizer> {
                self.core.obs_norm.as_mut()
            }

            fn set_obs_normalizer(
                &mut self,
                normalizer: Option<$crate::policy::ObsNormalizer>,
            ) -> $crate::Result<()> {
                self.core.set_obs_normalizer(normalizer)
            }

            fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
                self.core.set_pool(pool);
            }
        }
    };
}

pub(super) use policy_networks;
