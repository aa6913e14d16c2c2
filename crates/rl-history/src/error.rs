//! The one error type of `rl-history`.

/// Result alias used throughout `rl-history`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `rl-history`. Every message says what was wrong and
/// what to do about it; nothing changes when an error is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is invalid (a stack of 0 observations, an input width of 0).
    #[error("invalid configuration: {what} {problem}")]
    Config {
        /// The setting that is wrong, e.g. `"stack k"`.
        what: String,
        /// What is wrong with it and how to fix it.
        problem: String,
    },

    /// A buffer has the wrong number of elements.
    #[error(
        "{what} has {actual} elements but {expected} were expected: size it as environments (or rows) times the summarizer's width"
    )]
    ShapeMismatch {
        /// Which buffer, e.g. `"summarizer inputs (envs x input_len)"`.
        what: &'static str,
        /// Elements expected.
        expected: usize,
        /// Elements given.
        actual: usize,
    },

    /// An environment or storage row that does not exist.
    #[error("{what} {index} is out of range: there are {len}; pass an index below that")]
    OutOfRange {
        /// What the index names, e.g. `"environment"`.
        what: &'static str,
        /// The index given.
        index: usize,
        /// How many there are.
        len: usize,
    },

    /// The network layer refused something (a workspace or state of another cell).
    #[error(transparent)]
    Nn(#[from] rl_nn::Error),
}

impl Error {
    /// An [`Error::Config`].
    pub(crate) fn config(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Config {
            what: what.into(),
            problem: problem.into(),
        }
    }
}

/// `Ok` if `actual == expected`, else [`Error::ShapeMismatch`].
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

/// `Ok` if `index < len`, else [`Error::OutOfRange`].
pub(crate) fn check_index(what: &'static str, index: usize, len: usize) -> Result<()> {
    if index < len {
        Ok(())
    } else {
        Err(Error::OutOfRange { what, index, len })
    }
}
