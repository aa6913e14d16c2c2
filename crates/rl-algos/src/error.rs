//! The one error type of `rl-algos`.

/// Result alias used throughout `rl-algos`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `rl-algos`: invalid configurations, optimiser states
/// that do not fit the model, device failures.
///
/// Every message says what was wrong and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is invalid (a negative learning rate, a beta of 1 ...).
    #[error("invalid configuration: {what} {problem}")]
    Config {
        /// The setting that is wrong, e.g. `"adam.lr"`.
        what: String,
        /// What is wrong with it and how to fix it.
        problem: String,
    },

    /// A saved optimiser state has a tensor whose length differs from the model's.
    ///
    /// Tensors are counted in the model's visiting order (the order of
    /// `TensorCollection::iter_tensors`), trainable tensors only.
    #[error(
        "optimiser state tensor {tensor} has {actual} elements but the model's has {expected}: \
         the state was saved for another architecture; load it into the model it was saved with"
    )]
    StateMismatch {
        /// Index of the tensor, in visiting order over trainable tensors.
        tensor: usize,
        /// Elements of that tensor in the model.
        expected: usize,
        /// Elements of that tensor in the state.
        actual: usize,
    },

    /// A saved optimiser state holds a different number of tensors than the model.
    #[error(
        "optimiser state holds {actual} {what} tensors but the model has {expected} trainable tensors: \
         the state was saved for another architecture; load it into the model it was saved with"
    )]
    StateTensorCount {
        /// Which part of the state: `"first-moment"` or `"second-moment"`.
        what: &'static str,
        /// Trainable tensors in the model.
        expected: usize,
        /// Tensors in the state.
        actual: usize,
    },

    /// A dfdx device operation failed (on the CPU: an allocation).
    #[error("dfdx cpu operation failed: {source}; free memory or shrink the model or batch")]
    Device {
        /// The device error.
        #[from]
        source: dfdx::tensor::CpuError,
    },

    /// A policy network does not fit an environment's space (another number of actions,
    /// another observation length, a discrete space for a continuous policy ...).
    #[error(
        "the policy network expects {expected} but the environment's {what} is {actual}: \
         build the policy with sizes that match the environment"
    )]
    SpaceMismatch {
        /// Which space: `"action space"` or `"observation space"`.
        what: &'static str,
        /// What the network was built for, e.g. `"a discrete space of 2 actions"`.
        expected: String,
        /// The environment's space, e.g. `"a discrete space of 3 actions"`.
        actual: String,
    },

    /// A buffer given to a policy has the wrong number of elements.
    #[error(
        "{what} has {actual} elements but {expected} were expected: size it as rows times the network's width"
    )]
    ShapeMismatch {
        /// Which buffer, e.g. `"observations"` or `"log-prob output"`.
        what: &'static str,
        /// Elements expected.
        expected: usize,
        /// Elements given.
        actual: usize,
    },

    /// Checkpoint weights hold another number of tensors than the model.
    ///
    /// Tensors are counted in the model's visiting order (`TensorCollection::iter_tensors`),
    /// every tensor the model holds (see `NetWeights`).
    #[error(
        "the checkpoint holds {actual} tensors but the model has {expected}: \
         a checkpoint of another architecture; load it into a model of the type it was saved from"
    )]
    CheckpointTensorCount {
        /// Tensors in the model.
        expected: usize,
        /// Tensors in the checkpoint.
        actual: usize,
    },

    /// A checkpoint tensor has another shape than the model's tensor at the same index.
    #[error(
        "checkpoint tensor {tensor} has shape {actual:?} but the model's tensor {tensor} has shape \
         {expected:?}: a checkpoint of another architecture; load it into a model of the type it \
         was saved from"
    )]
    CheckpointShape {
        /// Index of the tensor, in the model's visiting order.
        tensor: usize,
        /// The shape of that tensor in the model.
        expected: Vec<usize>,
        /// The shape of that tensor in the checkpoint.
        actual: Vec<usize>,
    },

    /// A trainer checkpoint was saved by a trainer of another configuration or policy
    /// architecture (the seed aside); nothing was restored.
    #[error(
        "the checkpoint's {what} is {actual} but this trainer's is {expected}: \
         a checkpoint of another run; restore it into a trainer built with the same settings"
    )]
    CheckpointMismatch {
        /// What differs, e.g. `"policy architecture"` or `"ppo.epochs"`.
        what: String,
        /// This trainer's value.
        expected: String,
        /// The checkpoint's value.
        actual: String,
    },

    /// No checkpoint file at the path given.
    #[error(
        "no checkpoint at {}: check the path (a checkpoint is written by `Checkpoint::save`)",
        path.display()
    )]
    CheckpointNotFound {
        /// The path given.
        path: std::path::PathBuf,
    },

    /// Reading or writing a checkpoint file failed (other than a missing file).
    #[error(
        "could not {action} checkpoint {}: {source}; check permissions and free disk space",
        path.display()
    )]
    CheckpointIo {
        /// What was being done: `"read"`, `"write"` ...
        action: &'static str,
        /// The checkpoint's path.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The file is not a checkpoint of this crate (another `format` field).
    #[error(
        "{} is not an rl-algos checkpoint: its format is {found:?}, expected {expected:?}",
        path.display()
    )]
    CheckpointFormat {
        /// The checkpoint's path.
        path: std::path::PathBuf,
        /// The format the file declares.
        found: String,
        /// The format this crate writes.
        expected: &'static str,
    },

    /// The checkpoint was written by another version of the format.
    #[error(
        "checkpoint {} has format version {found} but this build reads version {supported}: \
         load it with the version of rl-algos that wrote it",
        path.display()
    )]
    CheckpointVersion {
        /// The checkpoint's path.
        path: std::path::PathBuf,
        /// The version the file declares.
        found: u32,
        /// The version this build reads and writes.
        supported: u32,
    },

    /// A checkpoint's content is unreadable or inconsistent (a truncated or damaged file,
    /// a tensor whose length is not its shape's product, moments that do not match the
    /// weights, an `extra` of another type ...).
    #[error(
        "checkpoint {what} is corrupt: {problem}; restore it from a good copy or save a new one"
    )]
    CheckpointCorrupt {
        /// Which checkpoint: its path, or `"in memory"`.
        what: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A checkpoint holds a NaN or infinite value, which its JSON format cannot store.
    #[error(
        "cannot save a checkpoint whose {what} tensor {tensor} holds {value} at element {element}: \
         training diverged; lower the learning rate or save before the divergence"
    )]
    CheckpointNonFinite {
        /// Which part: `"weights"`, `"first-moment"` or `"second-moment"`.
        what: &'static str,
        /// Index of the tensor.
        tensor: usize,
        /// Index of the element in the tensor.
        element: usize,
        /// The value.
        value: f32,
    },

    /// A discrete action given to a policy is not below its number of actions.
    #[error(
        "action {action} in row {row} is out of range for a policy of {actions} actions: use an index in 0..{actions}"
    )]
    ActionOutOfRange {
        /// Row of the batch.
        row: usize,
        /// The action index.
        action: u32,
        /// Actions of the policy.
        actions: usize,
    },

    /// A rollout-storage operation failed (a rollout that is not full, advantages not
    /// computed, a minibatch of another shape ...).
    #[error("rollout storage: {source}")]
    Storage {
        /// The storage error.
        #[from]
        source: rl_storage::Error,
    },

    /// A network operation failed (`rl-nn`: a shape or architecture mismatch, an
    /// optimiser state of another network, a checkpoint file that cannot be used ...).
    #[error("{source}")]
    Nn {
        /// The error.
        #[from]
        source: rl_nn::Error,
    },

    /// An `rl-core` or `rl-actions` operation failed (action scoring over a table, a
    /// space check ...).
    #[error("{source}")]
    Core {
        /// The error.
        #[from]
        source: rl_core::Error,
    },

    /// Training produced a NaN or infinite loss or gradient norm; the step was not
    /// applied.
    #[error(
        "training diverged: the {what} is {value}; lower the learning rate, clip gradients \
         harder or check the rewards for huge or non-finite values"
    )]
    Diverged {
        /// What was not finite: `"policy loss"`, `"value loss"`, `"entropy"` or
        /// `"gradient norm"`.
        what: &'static str,
        /// The value.
        value: f32,
    },
}

impl Error {
    /// Shorthand for [`Error::Config`].
    pub fn config(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Config {
            what: what.into(),
            problem: problem.into(),
        }
    }

    /// Shorthand for [`Error::ShapeMismatch`].
    pub(crate) fn shape(what: &'static str, expected: usize, actual: usize) -> Self {
        Error::ShapeMismatch {
            what,
            expected,
            actual,
        }
    }
}
