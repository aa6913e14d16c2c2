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
}

impl Error {
    /// Shorthand for [`Error::Config`].
    pub fn config(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Config {
            what: what.into(),
            problem: problem.into(),
        }
    }
}
