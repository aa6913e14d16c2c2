//! Actor-critic policies on `rl-nn`: a categorical one for discrete actions and a
//! diagonal Gaussian one for continuous actions, each an actor MLP and a separate critic
//! MLP whose sizes and activation are chosen at run time, and a recurrent categorical
//! one ([`RecurrentCategoricalPolicy`]) whose heads see a history summarizer's output
//! (an LSTM, a stack of observations, or nothing; [`History`]).
//!
//! Three small traits, each with one job:
//! - acting: `rl-collect`'s [`Policy`](rl_collect::Policy) and [`ValuePolicy`], so
//!   collectors drive them;
//! - [`PolicyNetworks`]: the named networks (for optimisers, checkpoints and weight files),
//!   the sampling generator and the observation normaliser;
//! - [`ActorCritic`]: what PPO needs: log-probabilities and values of stored actions
//!   without gradients (in minibatches, bit for bit those of one pass), and a training
//!   pass (log-probs, entropies, values) with its backward pass, both through a
//!   [`PolicyWorkspace`] allocated once.

mod categorical;
mod core;
mod gaussian;
mod normalize;
mod recurrent_categorical;

#[cfg(test)]
mod tests;

use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::ValuePolicy;
use rl_core::Space;
use rl_nn::{Activation, Architecture, Init, Weights};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub(crate) use self::core::CoreShape;
pub use self::core::{PolicyGradients, PolicyWorkspace};
pub use categorical::CategoricalPolicy;
pub use gaussian::GaussianPolicy;
pub use normalize::ObsNormalizer;
pub use recurrent_categorical::{
    ChunkBatch, ChunkRecord, History, HistorySlot, RecurrentCategoricalPolicy,
    RecurrentPolicyShape, RecurrentWorkspace,
};
pub(crate) use recurrent_categorical::{
    ReplayWorkspace, Summary, SummaryShape, SummaryState, Window,
};
pub use rl_nn::Observation;

/// How a policy chooses actions when a collector calls it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Draw from the policy's distribution (training). The default.
    #[default]
    Sample,
    /// The most likely action: the argmax of the logits, or the Gaussian's mean
    /// (evaluation). The log-prob written is that action's.
    Deterministic,
}

/// How the actor and critic start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyInit {
    /// PyTorch's default uniform initialisation, then the output layers scaled by
    /// [`PolicyConfig::actor_head_scale`] and [`PolicyConfig::critic_head_scale`] with
    /// zero biases. The default (the examples' settings were tuned with it).
    #[default]
    ScaledUniform,
    /// Stable-Baselines3's and CleanRL's: orthogonal weights with gain `sqrt(2)` in the
    /// hidden layers and [`PolicyConfig::actor_head_scale`] (0.01) or
    /// [`PolicyConfig::critic_head_scale`] (1) in the output layers, zero biases.
    Orthogonal,
}

/// What reads the observations before the policy's heads: a multilayer perceptron over
/// vectors, or a convolution stack over images (`[channels, height, width]`, or
/// `[height, width]` as one channel; `u8` frames or `f32` images). With a convolutional
/// encoder, [`PolicyConfig::hidden`] gives the widths of the linear layers between the
/// flatten and the output (`[512]` for the Nature network), and a policy's actor and
/// critic are linear heads on one shared torso (the convolutions and those layers), as
/// Stable-Baselines3's `CnnPolicy` and CleanRL's Atari agents have them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoder {
    /// Vectors through the hidden layers. The default.
    #[default]
    Mlp,
    /// The Nature DQN convolutions (Mnih et al. 2015; Stable-Baselines3's `NatureCNN`,
    /// CleanRL's Atari agents): 32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1 over
    /// 84x84 frames, inputs divided by 255.
    NatureCnn,
    /// Two 3x3 convolutions (16 and 32 channels, stride 1) for small grids (at least
    /// 5x5), inputs as given.
    SmallCnn,
}

impl Encoder {
    /// The name in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mlp => "mlp",
            Self::NatureCnn => "nature_cnn",
            Self::SmallCnn => "small_cnn",
        }
    }

    /// The network `input -> hidden -> out` of this encoder for observations of
    /// `shape` (DQN's Q network); frames of `bytes` are divided by 255 as the first
    /// convolution reads them.
    ///
    /// # Errors
    /// [`Error::Config`] for a shape the encoder cannot read (a convolution needs an
    /// image of 2 or 3 dimensions, the Nature network 84x84 frames).
    pub(crate) fn network(
        self,
        key: &'static str,
        shape: &[usize],
        bytes: bool,
        hidden: &[usize],
        out: usize,
        activation: Activation,
    ) -> Result<rl_nn::NetworkSpec> {
        let Some(mut spec) = self.convolutions(key, shape, bytes, activation)? else {
            let len = shape.iter().product::<usize>();
            return Ok(rl_nn::NetworkSpec::Mlp(rl_nn::MlpSpec::new(
                len, hidden, out, activation,
            )));
        };
        spec.linear = hidden.iter().copied().chain([out]).collect();
        spec.output = rl_nn::CnnOutput::Linear;
        Self::checked(key, spec)
    }

    /// The torso a policy's actor and critic heads share: the convolutions, a flatten
    /// and the `hidden` layers, every layer activated (Stable-Baselines3's
    /// `NatureCNN` features, CleanRL's shared network); `None` for [`Encoder::Mlp`],
    /// whose actor and critic are separate networks.
    ///
    /// # Errors
    /// As [`Encoder::network`].
    pub(crate) fn torso(
        self,
        key: &'static str,
        shape: &[usize],
        bytes: bool,
        hidden: &[usize],
        activation: Activation,
    ) -> Result<Option<rl_nn::NetworkSpec>> {
        let Some(mut spec) = self.convolutions(key, shape, bytes, activation)? else {
            return Ok(None);
        };
        spec.linear = hidden.to_vec();
        spec.output = rl_nn::CnnOutput::Activated;
        Self::checked(key, spec).map(Some)
    }

    fn checked(key: &'static str, spec: rl_nn::CnnSpec) -> Result<rl_nn::NetworkSpec> {
        spec.validate()
            .map_err(|e| Error::config(key, format!("cannot read these observations: {e}")))?;
        Ok(rl_nn::NetworkSpec::Cnn(spec))
    }

    /// The convolutions of this encoder over images of `shape` (no linear layer yet);
    /// `None` for [`Encoder::Mlp`].
    fn convolutions(
        self,
        key: &'static str,
        shape: &[usize],
        bytes: bool,
        activation: Activation,
    ) -> Result<Option<rl_nn::CnnSpec>> {
        let image = match (self, shape) {
            (Self::Mlp, _) => return Ok(None),
            (_, &[c, h, w]) => [c, h, w],
            (_, &[h, w]) => [1, h, w],
            (encoder, other) => {
                return Err(Error::config(
                    key,
                    format!(
                        "is \"{}\" but observations have shape {other:?}: a convolutional encoder reads images of [channels, height, width] or [height, width]; use \"mlp\" for vectors",
                        encoder.name()
                    ),
                ));
            }
        };
        let mut spec = match self {
            Self::NatureCnn => {
                if image[1..] != [84, 84] {
                    return Err(Error::config(
                        key,
                        format!(
                            "is \"nature_cnn\" but frames are {}x{}: it reads 84x84 frames (Atari preprocessing); use \"small_cnn\" for small grids",
                            image[1], image[2]
                        ),
                    ));
                }
                rl_nn::CnnSpec::nature_cnn(image[0], 1)
            }
            _ => rl_nn::CnnSpec::small_cnn(image, 1),
        };
        spec.input_scale = if bytes {
            rl_nn::InputScale::Div255
        } else {
            rl_nn::InputScale::Identity
        };
        spec.activation = activation;
        Ok(Some(spec))
    }
}

/// Construction settings shared by both policies. Start from [`PolicyConfig::new`] and
/// change fields with struct update syntax.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Hidden layer widths of the actor and of the critic (default `[64, 64]`), chosen at
    /// run time: at least one layer, every width at least 1.
    pub hidden: Vec<usize>,
    /// The nonlinearity between layers (default ReLU, cheaper than tanh).
    pub activation: Activation,
    /// How the networks start (default [`PolicyInit::ScaledUniform`]).
    #[serde(default)]
    pub init: PolicyInit,
    /// How actions are chosen (default [`Mode::Sample`]); also settable later.
    pub mode: Mode,
    /// The actor's output-layer scale or gain (default 0.01, Stable-Baselines3's gain
    /// for the policy head): the first policy is close to uniform (categorical) or has
    /// means close to 0 (Gaussian). Positive and finite.
    pub actor_head_scale: f32,
    /// The critic's output-layer scale or gain (default 1.0). Positive and finite.
    pub critic_head_scale: f32,
    /// Gaussian policies only: the initial log standard deviation of every action
    /// dimension (default 0.0, a standard deviation of 1). Finite.
    pub log_std_init: f32,
    /// What reads the observations (default [`Encoder::Mlp`]); a convolutional encoder
    /// is needed for frames of bytes.
    pub encoder: Encoder,
}

impl PolicyConfig {
    /// The defaults: hidden `[64, 64]`, ReLU, scaled uniform initialisation,
    /// [`Mode::Sample`], actor head scale 0.01, critic head scale 1.0, log-std 0.0.
    pub fn new() -> Self {
        Self {
            hidden: vec![64, 64],
            activation: Activation::Relu,
            init: PolicyInit::ScaledUniform,
            mode: Mode::Sample,
            actor_head_scale: 0.01,
            critic_head_scale: 1.0,
            log_std_init: 0.0,
            encoder: Encoder::Mlp,
        }
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first invalid field.
    pub fn validate(&self) -> Result<()> {
        if self.hidden.is_empty() || self.hidden.contains(&0) {
            return Err(Error::config(
                "policy.hidden",
                format!(
                    "is {:?}: give at least one hidden layer width, each at least 1 (64,64 is usual)",
                    self.hidden
                ),
            ));
        }
        for (what, scale) in [
            ("policy.actor_head_scale", self.actor_head_scale),
            ("policy.critic_head_scale", self.critic_head_scale),
        ] {
            if !(scale.is_finite() && scale > 0.0) {
                return Err(Error::config(
                    what,
                    format!(
                        "is {scale}: use a positive finite scale (0.01 for the actor, 1 for the critic)"
                    ),
                ));
            }
        }
        if !self.log_std_init.is_finite() {
            return Err(Error::config(
                "policy.log_std_init",
                format!(
                    "is {}: use a finite log standard deviation (0 means a standard deviation of 1)",
                    self.log_std_init
                ),
            ));
        }
        Ok(())
    }

    /// The initialisation of a network whose output layer has scale or gain `head`.
    fn init_of(&self, head: f32) -> Init {
        match self.init {
            PolicyInit::ScaledUniform => Init::Uniform,
            PolicyInit::Orthogonal => Init::Orthogonal {
                hidden_gain: std::f32::consts::SQRT_2,
                output_gain: head,
            },
        }
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// Which distribution a policy's actor parameterises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyKind {
    /// Logits of a categorical distribution over discrete actions.
    Categorical,
    /// Means of a diagonal Gaussian with a state-independent log standard deviation.
    Gaussian,
    /// Logits of a categorical distribution over discrete actions, after a history
    /// summarizer ([`RecurrentCategoricalPolicy`]).
    RecurrentCategorical(History),
}

/// What a policy is, as a comparable value: its kind and each named network's
/// architecture (sizes and activation). Checkpoints record it, and a trainer refuses a
/// checkpoint of another architecture even where tensor shapes agree.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PolicyArchitecture {
    /// The distribution.
    pub kind: PolicyKind,
    /// `(name, architecture)` of every network, in [`PolicyNetworks::network_names`]'
    /// order.
    pub networks: Vec<(String, Architecture)>,
}

impl std::fmt::Display for PolicyArchitecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.kind)?;
        for (name, architecture) in &self.networks {
            write!(f, "; {name}: {architecture}")?;
        }
        Ok(())
    }
}

/// What a feed-forward policy ([`CategoricalPolicy`], [`GaussianPolicy`]) is by size
/// alone: its observation and action lengths and its networks' parameter counts, from its
/// spaces and [`PolicyConfig`] before any network exists ([`ActorCritic::shape_for`]).
/// [`Ppo::blueprint`](crate::ppo::Ppo::blueprint) plans with it; a built policy's
/// [`ActorCritic::shape`] is the same value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyShape {
    obs_len: usize,
    act_len: usize,
    names: &'static [&'static str],
    core: CoreShape,
}

impl PolicyShape {
    /// A policy of `core` reading observations of `core.input` elements, writing actions
    /// of `act_len` elements, with networks `names`.
    pub(crate) fn new(core: CoreShape, act_len: usize, names: &'static [&'static str]) -> Self {
        Self {
            obs_len: core.input,
            act_len,
            names: core.names(names),
            core,
        }
    }

    /// Elements of one observation.
    pub fn obs_len(&self) -> usize {
        self.obs_len
    }

    /// Elements of one action (1 for a discrete index).
    pub fn act_len(&self) -> usize {
        self.act_len
    }

    /// Each network's name and parameter count, in
    /// [`PolicyNetworks::network_names`]' order.
    pub fn networks(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        self.names
            .iter()
            .copied()
            .zip(self.core.params().iter().copied())
    }

    /// Parameters over every network.
    pub fn num_params(&self) -> usize {
        self.core.params().iter().sum()
    }

    /// Bytes of [`ActorCritic::workspace`] for `max_rows` rows.
    ///
    /// # Errors
    /// [`Error::Config`] when the bytes overflow (naming `what`, the setting the rows
    /// come from).
    pub fn workspace_bytes(&self, max_rows: usize, what: &'static str) -> Result<u64> {
        self.core
            .workspace_bytes(max_rows, crate::learner::Sizes::of(what))
    }
}

/// An `f32` box's elements, or [`Error::SpaceMismatch`] naming `what`.
fn box_len(what: &'static str, space: &Space) -> Result<usize> {
    match space {
        Space::Box(b) if b.dtype() == rl_core::DType::F32 => Ok(b.flat_len()),
        other => Err(Error::SpaceMismatch {
            what,
            expected: "a box of f32 elements".to_owned(),
            actual: describe(other),
        }),
    }
}

/// The shape of an observation box of `f32` or `u8` elements; frames of bytes need a
/// convolutional `encoder`.
///
/// # Errors
/// [`Error::SpaceMismatch`] for another space; [`Error::Config`] for `u8` frames with an
/// [`Encoder::Mlp`].
pub(crate) fn obs_shape(space: &Space, encoder: Encoder, key: &'static str) -> Result<Vec<usize>> {
    match space {
        Space::Box(b) if b.dtype() == rl_core::DType::F32 => Ok(b.shape().to_vec()),
        Space::Box(b) if b.dtype() == rl_core::DType::U8 => {
            if encoder == Encoder::Mlp {
                return Err(Error::config(
                    key,
                    format!(
                        "is \"mlp\" but observations are frames of bytes (u8, shape {:?}): pick a convolutional encoder, {key} = \"nature_cnn\" for 84x84 Atari frames or \"small_cnn\" for small grids",
                        b.shape()
                    ),
                ));
            }
            Ok(b.shape().to_vec())
        }
        other => Err(Error::SpaceMismatch {
            what: "observation space",
            expected: "a box of f32 or u8 elements".to_owned(),
            actual: describe(other),
        }),
    }
}

/// A discrete space's actions, or [`Error::SpaceMismatch`].
fn discrete_len(space: &Space) -> Result<usize> {
    match space {
        Space::Discrete { n } => Ok(*n as usize),
        other => Err(Error::SpaceMismatch {
            what: "action space",
            expected: "a discrete space".to_owned(),
            actual: describe(other),
        }),
    }
}

/// A policy's trainable parts by name (what optimisers, checkpoints and weight files
/// see), and the state acting depends on besides weights: the sampling generator and
/// the observation normaliser.
pub trait PolicyNetworks {
    /// The networks' names, in order (`["actor", "critic"]`, and `"log_std"` for a
    /// Gaussian policy).
    fn network_names(&self) -> &'static [&'static str];

    /// The network at `index` of [`PolicyNetworks::network_names`]; `None` past the end.
    fn network(&self, index: usize) -> Option<&dyn Weights>;

    /// The network at `index`, mutably; `None` past the end.
    fn network_mut(&mut self, index: usize) -> Option<&mut dyn Weights>;

    /// What the policy is.
    fn architecture(&self) -> PolicyArchitecture;

    /// A copy of the generator that samples actions (its exact state: a policy given it
    /// with [`PolicyNetworks::set_sampling_state`] draws the same actions from then on).
    fn sampling_state(&self) -> Xoshiro256PlusPlus;

    /// Replaces the generator that samples actions.
    fn set_sampling_state(&mut self, state: Xoshiro256PlusPlus);

    /// The observation normaliser every input goes through, if any (none by default).
    fn obs_normalizer(&self) -> Option<&ObsNormalizer>;

    /// The observation normaliser, mutably (to update its statistics).
    fn obs_normalizer_mut(&mut self) -> Option<&mut ObsNormalizer>;

    /// Installs (or with `None` removes) the observation normaliser.
    ///
    /// # Errors
    /// [`Error::Config`] for a normaliser of another observation length or with
    /// non-finite statistics; the policy is then unchanged.
    fn set_obs_normalizer(&mut self, normalizer: Option<ObsNormalizer>) -> Result<()>;

    /// Runs acting's forward passes (actions and values for a batch of observations) on
    /// `pool`'s threads (`None`: on the calling thread, the default): what a trainer's
    /// collector acts with when `run.threads` is above 1. The actions, log-probs and
    /// values are bit-identical whatever the pool's size. A clone keeps the pool.
    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>);
}

/// What PPO needs of an actor-critic policy: evaluation of stored actions without
/// gradients, and a training pass with its backward pass, each through a
/// [`PolicyWorkspace`] made once ([`ActorCritic::workspace`]).
///
/// Observations are `f32` rows of [`ActorCritic::obs_len`] elements; actions rows of
/// [`ActorCritic::act_len`] elements (one `u32` index for a categorical policy).
pub trait ActorCritic: ValuePolicy<Obs: rl_nn::Observation, State = ()> + PolicyNetworks {
    /// What a policy of this type for `observation_space`, `action_space` and `config`
    /// is by size alone, before any network exists (what plans read).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] for spaces the policy cannot take; [`Error::Config`] for
    /// an invalid `config` or sizes whose parameters overflow.
    fn shape_for(
        observation_space: &Space,
        action_space: &Space,
        config: &PolicyConfig,
    ) -> Result<PolicyShape>
    where
        Self: Sized;

    /// This policy's shape: what [`ActorCritic::shape_for`] gives for its spaces and
    /// settings.
    fn shape(&self) -> PolicyShape;

    /// Elements of one observation.
    fn obs_len(&self) -> usize;

    /// Elements of one action (1 for a discrete index).
    fn act_len(&self) -> usize;

    /// Scratch for passes over up to `max_rows` rows (at least 1): allocated here,
    /// reused by every pass after.
    fn workspace(&self, max_rows: usize) -> PolicyWorkspace;

    /// Writes `log pi(a | s)` of `actions` and `V(s)` for every row of `obs`, through
    /// `ws`, `ws.max_rows()` rows at a time: live memory is bounded by the workspace
    /// whatever the number of rows, and the numbers equal those of one pass over all
    /// rows, bit for bit (rows are independent). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if the slices do not hold the same number of rows;
    /// [`Error::ActionOutOfRange`] for a discrete action not below the action count;
    /// [`Error::Config`] for a workspace of another policy.
    fn evaluate_minibatched(
        &self,
        obs: &[Self::Obs],
        actions: &[Self::Act],
        log_probs: &mut [f32],
        values: &mut [f32],
        ws: &mut PolicyWorkspace,
    ) -> Result<()>;

    /// As [`ActorCritic::evaluate_minibatched`] with a workspace made for all the rows
    /// (allocated by the call: for tests and one-off evaluations).
    ///
    /// # Errors
    /// As [`ActorCritic::evaluate_minibatched`].
    fn log_probs_and_values(
        &self,
        obs: &[Self::Obs],
        actions: &[Self::Act],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) -> Result<()> {
        let mut ws = self.workspace(log_probs.len().max(1));
        self.evaluate_minibatched(obs, actions, log_probs, values, &mut ws)
    }

    /// The training pass over at most `ws.max_rows()` rows: log-probs of `actions`,
    /// entropies and values, left in `ws` ([`PolicyWorkspace::log_probs`],
    /// [`PolicyWorkspace::entropies`], [`PolicyWorkspace::values`]) with what
    /// [`ActorCritic::backward`] needs. Allocates nothing.
    ///
    /// # Errors
    /// As [`ActorCritic::evaluate_minibatched`], and [`Error::ShapeMismatch`] for more
    /// rows than the workspace holds.
    fn evaluate(
        &self,
        obs: &[Self::Obs],
        actions: &[Self::Act],
        ws: &mut PolicyWorkspace,
    ) -> Result<()>;

    /// The backward pass of the last [`ActorCritic::evaluate`] through `ws`, given the
    /// gradient of a loss with respect to each row's log-prob, entropy and value: adds
    /// the parameter gradients into `grads` (one buffer per network, from
    /// [`PolicyGradients::new`]). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for per-row slices or gradient buffers of the wrong
    /// length, or actions other than those evaluated.
    fn backward(
        &self,
        actions: &[Self::Act],
        d_log_probs: &[f32],
        d_entropies: &[f32],
        d_values: &[f32],
        ws: &mut PolicyWorkspace,
        grads: &mut PolicyGradients,
    ) -> Result<()>;
}

/// Checks that `obs`, `actions` and the per-row output hold `rows` rows.
fn check_rows<O, A>(
    rows: usize,
    obs_len: usize,
    act_len: usize,
    obs: &[O],
    actions: &[A],
    per_row: &[f32],
) -> Result<()> {
    check_len("observations", rows * obs_len, obs.len())?;
    check_len("actions", rows * act_len, actions.len())?;
    check_len("value output", rows, per_row.len())
}

/// `Ok` when a buffer has the `expected` number of elements, else [`Error::ShapeMismatch`].
pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            what,
            expected,
            actual,
        })
    }
}

/// Rows in `obs`, which must be a whole number of `obs_len` rows.
fn rows_of<O>(obs: &[O], obs_len: usize) -> Result<usize> {
    let rows = obs.len() / obs_len;
    check_len("observations", rows * obs_len, obs.len())?;
    Ok(rows)
}

/// Describes a space for error messages.
pub(crate) fn describe(space: &rl_core::Space) -> String {
    match space {
        rl_core::Space::Discrete { n } => format!("a discrete space of {n} actions"),
        rl_core::Space::Box(b) => format!(
            "a box of {} {} elements (shape {:?})",
            b.flat_len(),
            b.dtype(),
            b.shape()
        ),
    }
}

/// Checks that `space` is a box of `len` elements of type `O`.
fn check_box<O: rl_core::Element>(
    what: &'static str,
    space: &rl_core::Space,
    len: usize,
) -> Result<()> {
    match space {
        rl_core::Space::Box(b) if b.dtype() == O::DTYPE && b.flat_len() == len => Ok(()),
        _ => Err(Error::SpaceMismatch {
            what,
            expected: format!("a box of {len} {} elements", O::DTYPE),
            actual: describe(space),
        }),
    }
}
