//! The one error type of `rl-core`, shared by every crate that has no richer needs.

use crate::memory::{Location, PlanLine};

/// Result alias used throughout the workspace.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the shared vocabulary: bad actions, bad shapes, bad
/// configurations, memory plans over budget, I/O.
///
/// Every message says what was wrong and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A discrete action index is not below the number of actions.
    #[error(
        "action index {index} is out of range for a discrete space of {n} actions: use an index in 0..{n}"
    )]
    ActionOutOfRange {
        /// The index that was given.
        index: u64,
        /// The number of actions of the space.
        n: u32,
    },

    /// A continuous action holds NaN or an infinity.
    #[error(
        "action element {position} is {value}, not a finite number: check the policy output for NaN or overflow"
    )]
    NonFiniteAction {
        /// Position of the offending element in the action slice.
        position: usize,
        /// The offending value.
        value: f32,
    },

    /// A buffer (action, observation, column slice) has the wrong number of elements.
    #[error(
        "{what} has {actual} elements but {expected} were expected: size the buffer from the space or schema"
    )]
    ShapeMismatch {
        /// What the buffer is, e.g. "action" or "observation buffer".
        what: &'static str,
        /// The length the space or schema asks for.
        expected: usize,
        /// The length that was given.
        actual: usize,
    },

    /// `step` was called on an environment whose episode has ended (or never started).
    #[error("step called {state}: call reset first")]
    NeedsReset {
        /// Why the environment cannot step, e.g. "after the episode ended".
        state: &'static str,
    },

    /// A configuration value is invalid (zero capacity, empty name, duplicated column ...).
    #[error("invalid configuration: {what} {problem}")]
    InvalidConfig {
        /// The setting that is wrong, e.g. "capacity".
        what: String,
        /// What is wrong with it and how to fix it.
        problem: String,
    },

    /// A memory plan does not fit the configured budget. Nothing was allocated.
    #[error(
        "memory plan needs {planned} of {location} but the budget allows {budget}; largest lines: {largest}; \
         shrink the largest components or raise the budget",
        planned = crate::memory::Bytes(*planned),
        budget = crate::memory::Bytes(*budget),
        largest = PlanLine::join(largest)
    )]
    OverBudget {
        /// Where the memory would live.
        location: Location,
        /// Bytes the plan needs there.
        planned: u64,
        /// Bytes the budget allows there.
        budget: u64,
        /// The largest lines of the plan at that location, largest first (at most three).
        largest: Vec<PlanLine>,
    },

    /// The platform cannot do what was asked (e.g. reading `/proc` off Linux).
    #[error("{what} is not supported on this platform")]
    Unsupported {
        /// The unsupported operation.
        what: &'static str,
    },

    /// An environment's state could not be saved or restored: an environment that
    /// cannot save its state, or a state of another environment or a damaged one.
    #[error("environment state: {problem}")]
    EnvState {
        /// What was wrong and what to do.
        problem: String,
    },

    /// An operating-system I/O call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path involved.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidConfig`].
    pub fn config(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::InvalidConfig {
            what: what.into(),
            problem: problem.into(),
        }
    }
}
