//! Experience collectors with fixed memory.
//!
//! **Status: skeleton.** The collect issue fills this crate. What it will hold:
//!
//! - A small `Policy` trait that writes actions (and optional log-probs and values) for a
//!   batch of observations into caller-owned buffers.
//! - A synchronous collector stepping `N` environments in the caller's thread and writing
//!   straight into an `rl-storage` buffer, and an asynchronous collector whose worker
//!   threads fill chunks from a fixed pool sent through a bounded channel.
//! - With [`rl_core::Device::Cpu`] everywhere nothing initialises CUDA, even with the
//!   `cuda` feature compiled in; allocation is zero per batch after the first.
//!
//! # Features
//! - `cuda`: forwards to `rl-storage/cuda`.
