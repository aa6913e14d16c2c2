//! Action representations that keep 100k-action spaces in bounded memory.
//!
//! **Status: skeleton.** The actions issue fills this crate. What it will hold:
//!
//! - Representations of a discrete action, which is always *stored* as a `u32` index:
//!   the index itself, one-hot (materialised for one minibatch at a time into a reused
//!   buffer, never stored), binary codes, and feature/embedding tables shared once per
//!   process ([`rl_core::FeatureTable`]).
//! - Scoring all actions in chunks, so that softmax, entropy, sampling and top-k over `n`
//!   actions never build a `batch x n x d` tensor.
//! - Action masks as bitsets.
