//! The one error type of `rl-algos`.

/// Result alias used throughout `rl-algos`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `rl-algos`: invalid configurations, inputs of the
/// wrong shape, checkpoints of another run, network and storage errors, divergence.
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

    /// A policy refused to act (a policy of another crate, or buffers of the wrong
    /// length).
    #[error("policy: {source}")]
    Policy {
        /// The policy's error.
        source: rl_collect::PolicyError,
    },

    /// A storage operation failed (a rollout that is not full, advantages not computed,
    /// a replay checkpoint that cannot be read, a plan over the memory budget ...).
    #[error("storage: {source}")]
    Storage {
        /// The storage error.
        #[from]
        source: rl_storage::Error,
    },

    /// The collector failed (an environment's error or non-finite output at a given
    /// env and step, a policy's error, spaces that do not match ...).
    #[error("collector: {source}")]
    Collect {
        /// The collector's error.
        #[from]
        source: rl_collect::Error,
    },

    /// Remote collection failed: the `ChunkSource` of `rl-train` (collectors in
    /// other processes, Ray actors) gave up or delivered something unusable.
    #[error("remote collection: {0}")]
    Remote(String),

    /// A network operation failed (`rl-nn`: an architecture mismatch, an optimiser
    /// state of another network, a checkpoint file that cannot be used ...). `rl-nn`'s
    /// configuration and shape errors arrive as [`Error::Config`] and
    /// [`Error::ShapeMismatch`].
    #[error("{source}")]
    Nn {
        /// The error.
        source: rl_nn::Error,
    },

    /// A history summarizer refused an operation (`rl-history`: a state of another
    /// summarizer, an environment it does not have ...). Its configuration and shape
    /// errors arrive as [`Error::Config`] and [`Error::ShapeMismatch`].
    #[error("{source}")]
    History {
        /// The error.
        source: rl_history::Error,
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

impl From<rl_nn::Error> for Error {
    fn from(source: rl_nn::Error) -> Self {
        match source {
            rl_nn::Error::Config { what, problem } => Self::Config { what, problem },
            rl_nn::Error::ShapeMismatch {
                what,
                expected,
                actual,
            } => Self::ShapeMismatch {
                what,
                expected,
                actual,
            },
            source => Self::Nn { source },
        }
    }
}

impl From<rl_history::Error> for Error {
    fn from(source: rl_history::Error) -> Self {
        match source {
            rl_history::Error::Config { what, problem } => Self::Config { what, problem },
            rl_history::Error::ShapeMismatch {
                what,
                expected,
                actual,
            } => Self::ShapeMismatch {
                what,
                expected,
                actual,
            },
            rl_history::Error::Nn(source) => source.into(),
            source => Self::History { source },
        }
    }
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

/// The first listed field where two configurations of type `$ty` differ, as
/// [`Error::CheckpointMismatch`] naming `<prefix>.<field>` with both values (`Debug`);
/// `Ok(())` when they all agree. The struct is destructured exhaustively: a field added
/// to it and listed neither to compare nor under `except` does not compile.
macro_rules! first_difference {
    (
        $ty:ident, $prefix:literal, $ours:expr, $theirs:expr,
        [$($field:ident),* $(,)?], except [$($skip:ident),* $(,)?]
    ) => {{
        let ours: &$ty = $ours;
        let theirs: &$ty = $theirs;
        let $ty { $($field: _,)* $($skip: _,)* } = ours;
        let mut result: $crate::error::Result<()> = Ok(());
        $(
            if result.is_ok() && ours.$field != theirs.$field {
                result = Err($crate::error::Error::CheckpointMismatch {
                    what: format!("{}.{}", $prefix, stringify!($field)),
                    expected: format!("{:?}", ours.$field),
                    actual: format!("{:?}", theirs.$field),
                });
            }
        )*
        result
    }};
}
pub(crate) use first_difference;
