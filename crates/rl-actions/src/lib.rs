//! Action representations that keep 100k-action spaces in bounded memory.
//!
//! A discrete action is always *stored* as a `u32` index (4 bytes per transition, whatever
//! the number of actions). What a network sees is chosen per use, through the small
//! [`ActionEncoding`] trait, and materialised for one minibatch at a time into a buffer
//! the caller owns and reuses:
//!
//! - [`Index`]: the index itself, as one float.
//! - [`OneHot`]: `n` floats per action. Never stored; its [`MemoryPlan`](rl_core::MemoryPlan) says what a
//!   minibatch costs (`batch x n x 4` bytes: about 100 MB for 256 x 100k actions).
//! - [`Binary`]: `ceil(log2 n)` bits per action, with [`Binary::decode`] back to indices.
//! - [`Embedding`]: rows of a [`FeatureTable`](rl_core::FeatureTable) held once per process and shared by every
//!   clone (the environment's `action_features()`, for instance).
//!
//! Policies over such spaces score every action: `s[b, i] = <q[b], f_i>` for a state
//! vector `q[b]` and action features `f_i`. [`ChunkedScorer`] computes these scores
//! `chunk` actions at a time into a reused `batch x chunk` scratch, and builds on them,
//! without ever forming the `batch x n x d` tensor (or even `batch x n`, except in the
//! explicit [`ChunkedScorer::full_distribution`]): log-probabilities of given actions
//! (streaming log-sum-exp), entropy, expectations of another chunked score (the discrete
//! SAC soft value), sampling (Gumbel-max or inverse CDF, with a caller-seeded RNG) and
//! top-k. Nothing allocates after construction.
//!
//! [`ActionMask`] is a bitset of available actions; through [`Masks`] every chunked
//! operation gives masked actions a `-inf` score, and a row with no available action is
//! a typed error.
//!
//! Errors are [`rl_core::Error`]: an index out of range is
//! [`Error::ActionOutOfRange`](rl_core::Error::ActionOutOfRange), never clamped.
//!
//! Learnable tables (embeddings trained with the policy) come with discrete SAC later;
//! they will use the `dfdx` dependency this crate already declares. Everything here is
//! plain Rust on fixed tables.
//!
//! # Example
//!
//! ```
//! use rl_actions::{ActionEncoding, ActionMask, ChunkedScorer, Embedding, Masks, OneHot};
//! use rl_core::{FeatureTable, Location};
//!
//! # fn main() -> rl_core::Result<()> {
//! // 1000 actions with 4 features each, held once.
//! let (n, d) = (1000, 4);
//! let data = (0..n * d).map(|x| ((x % 17) as f32 - 8.0) / 8.0).collect();
//! let table = FeatureTable::new(n, d, data)?;
//!
//! // Encode a minibatch of stored indices into a reused buffer.
//! let embedding = Embedding::new(table.clone())?;
//! let mut buf = vec![0.0; 2 * embedding.width()];
//! embedding.encode(&[3, 999], &mut buf)?;
//! assert_eq!(&buf[..d], table.row(3).unwrap_or_default());
//! assert!(OneHot::new(1000)?.encode(&[1000], &mut vec![0.0; 1000]).is_err());
//! assert!(OneHot::new(1000)?.memory_plan(256).total(Location::Ram) > 1_000_000);
//!
//! // Score all actions 128 at a time for a batch of 2 state vectors.
//! let mut scorer = ChunkedScorer::new(table, 128, 2)?;
//! let q = [0.5, -0.25, 1.0, 0.0, 0.1, 0.2, 0.3, 0.4];
//! let mut mask = ActionMask::all(1000);
//! mask.forbid(7)?;
//! let mut logp = [0.0; 2];
//! scorer.log_softmax(&q, &[3, 7], Masks::Shared(&mask), &mut logp)?;
//! assert!(logp[0] < 0.0 && logp[1] == f32::NEG_INFINITY);
//! let (mut top, mut scores) = ([0u32; 6], [0.0f32; 6]);
//! scorer.top_k(&q, Masks::Shared(&mask), 3, &mut top, &mut scores)?;
//! assert!(scores[0] >= scores[1] && !top.contains(&7));
//! # Ok(())
//! # }
//! ```

mod encoding;
mod mask;
mod scorer;

pub use encoding::{ActionEncoding, Binary, Embedding, Index, OneHot};
pub use mask::{ActionMask, Masks};
pub use scorer::{ChunkValues, ChunkedScorer, Sampling, dot_scores};

#[cfg(test)]
#[global_allocator]
static A: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
