//! Cross-crate integration tests, in one binary (faster to build than one per file).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

#[cfg(feature = "cli")]
mod cli;
mod envs_through_facade;
mod errors;
#[cfg(feature = "cli")]
mod own_env;
#[cfg(feature = "cli")]
mod pixels;
#[cfg(all(
    feature = "algos",
    feature = "collect",
    feature = "storage",
    feature = "train"
))]
mod sac;
