//! History summarizers for partially observed environments.
//!
//! **Status: skeleton.** A later issue fills this crate. What it will hold:
//!
//! - A summarizer interface that turns the recent history of observations (and actions)
//!   into the input of a policy.
//! - Identity (the last observation) and stacking of the last `k` observations, rebuilt
//!   from indices at sample time so nothing is stored twice.
//! - An LSTM summarizer (a cell on `rl-nn`) whose history is a **bounded window**
//!   of a configured length: memory per environment is fixed, never the whole episode.
