//! The error type of `rl-collect`.

/// A policy's own error, boxed: policies come from other crates with their own types.
pub type PolicyError = Box<dyn std::error::Error + Send + Sync>;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can stop a collector. Every error names the environment and step where it applies.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment refused a step or a reset (invalid action, wrong buffer length ...).
    #[error("environment {env} at step {step}: {source}")]
    Env {
        /// Index of the environment in the collector.
        env: usize,
        /// Collector step (batched step count since construction).
        step: u64,
        /// The environment's error.
        #[source]
        source: rl_core::Error,
    },

    /// An environment returned NaN or an infinite reward.
    #[error(
        "environment {env} at step {step} returned the reward {value}: fix the environment (rewards must be finite)"
    )]
    NonFiniteReward {
        /// Index of the environment.
        env: usize,
        /// Collector step.
        step: u64,
        /// The reward.
        value: f32,
    },

    /// An environment wrote NaN or an infinity into its observation.
    #[error(
        "environment {env} at step {step} wrote {value} at observation element {element}: fix the environment (observations must be finite)"
    )]
    NonFiniteObservation {
        /// Index of the environment.
        env: usize,
        /// Collector step.
        step: u64,
        /// Position in the observation.
        element: usize,
        /// The value.
        value: f32,
    },

    /// The policy failed or produced an invalid action.
    #[error("policy at step {step}: {source}")]
    Policy {
        /// Collector step.
        step: u64,
        /// The policy's error.
        #[source]
        source: PolicyError,
    },

    /// A configuration value is invalid (zero environments, mismatched spaces ...).
    #[error(transparent)]
    Config(#[from] rl_core::Error),

    /// Writing into a buffer failed.
    #[error(transparent)]
    Storage(#[from] rl_storage::Error),

    /// A worker thread of an asynchronous collector failed; the collector has stopped.
    #[error("worker {worker} failed: {source}")]
    Worker {
        /// Index of the worker.
        worker: usize,
        /// What failed.
        #[source]
        source: Box<Error>,
    },

    /// A worker thread panicked; the collector has stopped.
    #[error("worker {worker} panicked: {message}")]
    WorkerPanicked {
        /// Index of the worker.
        worker: usize,
        /// The panic message, if it was a string.
        message: String,
    },

    /// The collector was stopped (after a failure, or because it collected its total frames).
    #[error("the collector has stopped{reason}: create a new one to collect more")]
    Stopped {
        /// Why, starting with a separator (may be empty).
        reason: &'static str,
    },
}

impl Error {
    pub(crate) fn config(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Config(rl_core::Error::config(what, problem))
    }
}
