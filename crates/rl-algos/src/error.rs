//! The one error type of `rl-algos`, and the [`Key`] its configuration errors name.

use std::borrow::Cow;
use std::fmt;

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
    #[error("invalid configuration: {key} {problem}")]
    Config {
        /// The setting that is wrong, as a path of names, e.g. `ppo.adam.lr`.
        key: Key,
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
    /// architecture; nothing was restored.
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
            rl_nn::Error::Config { what, problem } => Self::Config {
                key: Key::from(what),
                problem,
            },
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
            rl_history::Error::Config { what, problem } => Self::Config {
                key: Key::from(what),
                problem,
            },
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
    /// Shorthand for [`Error::Config`]; a dotted `key` (`"ppo.n_steps"`) is split into
    /// its names.
    pub fn config(key: impl Into<Key>, problem: impl Into<String>) -> Self {
        Error::Config {
            key: key.into(),
            problem: problem.into(),
        }
    }

    /// A configuration error of a setting nested in `parent` names it under `parent`
    /// (`lr` in `adam` becomes `adam.lr`); any other error is returned as it is.
    #[must_use]
    pub fn within(self, parent: &'static str) -> Self {
        match self {
            Error::Config { key, problem } => Error::Config {
                key: key.within(parent),
                problem,
            },
            other => other,
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

/// The first setting but the learning rate where two optimiser configurations differ,
/// as [`Error::CheckpointMismatch`] naming `<prefix>.adam.<field>`. The rate is left out:
/// it may change on resume (the restored optimiser takes the configured one).
pub(crate) fn adam_difference(
    prefix: &str,
    ours: &rl_nn::AdamConfig,
    theirs: &rl_nn::AdamConfig,
) -> Result<()> {
    let rl_nn::AdamConfig {
        lr: _,
        betas,
        eps,
        weight_decay,
    } = ours;
    let differs = [
        (
            "betas",
            *betas != theirs.betas,
            format!("{betas:?}"),
            format!("{:?}", theirs.betas),
        ),
        (
            "eps",
            *eps != theirs.eps,
            eps.to_string(),
            theirs.eps.to_string(),
        ),
        (
            "weight_decay",
            *weight_decay != theirs.weight_decay,
            format!("{weight_decay:?}"),
            format!("{:?}", theirs.weight_decay),
        ),
    ];
    match differs.into_iter().find(|(_, differs, _, _)| *differs) {
        Some((field, _, expected, actual)) => Err(Error::CheckpointMismatch {
            what: format!("{prefix}.adam.{field}"),
            expected,
            actual,
        }),
        None => Ok(()),
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

/// The path of a configuration setting: the names from the outermost table to the
/// field, e.g. `["ppo", "adam", "lr"]`, written `ppo.adam.lr`.
///
/// The configurations of a run name their settings from the table of a run's config
/// that holds them (`ppo.n_steps`, `sac.tau`, `dqn.exploration.end`, `policy.hidden`,
/// `recurrent.seq_len`); a type nested in several configurations (a `History`, an
/// `AdamConfig`) names its settings from itself and its owner puts them under its own
/// name with [`Key::within`] / [`Error::within`]. So a layer above (the `rl` command's
/// config file) composes keys from these names and never rebuilds them from text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Key(Vec<Cow<'static, str>>);

impl Key {
    /// A key of the given names, outermost first.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        Self(names.into_iter().map(Into::into).collect())
    }

    /// The names, outermost first.
    pub fn names(&self) -> &[Cow<'static, str>] {
        &self.0
    }

    /// This key under `parent`: `lr` within `adam` is `adam.lr`.
    #[must_use]
    pub fn within(mut self, parent: impl Into<Cow<'static, str>>) -> Self {
        self.0.insert(0, parent.into());
        self
    }

    /// `name` under this key: `adam` joined with `lr` is `adam.lr`.
    #[must_use]
    pub fn join(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.0.push(name.into());
        self
    }
}

/// Splits a dotted key (`"ppo.adam.lr"`) into its names, borrowing them.
impl From<&'static str> for Key {
    fn from(dotted: &'static str) -> Self {
        Self(dotted.split('.').map(Cow::Borrowed).collect())
    }
}

/// Splits a dotted key (`"adam.lr"`, as `rl-nn` and `rl-history` name their settings)
/// into its names.
impl From<String> for Key {
    fn from(dotted: String) -> Self {
        Self(
            dotted
                .split('.')
                .map(|n| Cow::Owned(n.to_owned()))
                .collect(),
        )
    }
}

/// The names joined by dots: `ppo.adam.lr`.
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

/// Compares with the dotted text, for tests and matching: `key == "ppo.n_steps"`.
impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        let mut rest = other;
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                let Some(r) = rest.strip_prefix('.') else {
                    return false;
                };
                rest = r;
            }
            let Some(r) = rest.strip_prefix(name.as_ref()) else {
                return false;
            };
            rest = r;
        }
        rest.is_empty()
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}
