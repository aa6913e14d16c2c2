//! Cross-crate integration tests, in one binary (faster to build than one per file).

mod envs_through_facade;
