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
//! vector `q[b]` and action features `f_i` (or, with [`ChunkedScorer::identity`],
//! `s[b, i] = q[b][i]`: the index / one-hot head with one output per action).
//! [`ChunkedScorer`] computes these scores `chunk` actions at a time into a reused
//! `batch x chunk` scratch, and builds on them, without ever forming the `batch x n x d`
//! tensor (or even `batch x n`, except in the explicit
//! [`ChunkedScorer::full_distribution`]): log-probabilities of given actions (streaming
//! log-sum-exp), entropy, expectations of another chunked score, sampling (Gumbel-max or
//! inverse CDF, with a caller-seeded RNG) and top-k. Nothing allocates after construction.
//!
//! Discrete soft actor-critic (Christodoulou 2019) in the two-tower form, where the actor
//! gives `q[b]` and two critics give `g1[b]`, `g2[b]` with `Q_i(s_b, a) = <g_i[b], f_a>`,
//! has its own operations: [`ChunkedScorer::soft_policy_loss`] (the actor objective
//! `sum_a pi (alpha log pi - min(Q_1, Q_2))`, the entropy and the gradient with respect
//! to `q`, in one pass over the actions), [`ChunkedScorer::soft_value`] (the critic
//! target's soft state value), [`ChunkedScorer::action_scores`] (`Q` of the actions
//! taken) and its backward [`ChunkedScorer::add_action_grad`].
//!
//! Operations over a batch take the actions a tile at a time ([`ChunkedScorer::tile`]:
//! 16 KiB of table, 512 actions for `d = 8`) with the batch rows inside, so every row
//! reads a tile while it is in the L1 cache; each row keeps a running (online)
//! log-sum-exp, its max and sums rescaled as tiles come.
//!
//! The hot loops vectorise across actions (a transposed copy of the table, a polynomial
//! `f32` exponential, per-tile sums merged in `f64`); on x86-64 the AVX-512 or AVX2 + FMA
//! copy of them is picked at runtime, the one [`rl_core::simd::Isa::detect`] chose for
//! the process (as rl-nn's products do). 256 rows x 100k actions x d = 8 take tens of
//! milliseconds on one core; `cargo xtask bench actions` measures them.
//!
//! [`ActionMask`] is a bitset of available actions; through [`Masks`] every chunked
//! operation gives masked actions a `-inf` score (probability 0, whatever the critics
//! say about them), and a row with no available action is a typed error.
//!
//! Errors are [`rl_core::Error`]: an index out of range is
//! [`Error::ActionOutOfRange`](rl_core::Error::ActionOutOfRange), never clamped.
//!
//! Tables can be learned: [`ChunkedScorer::update_table`] changes the scorer's table in
//! place after an optimiser step (copy-on-write the first time, so the environment's
//! handle keeps the original) and refreshes its transposed copy; `rl-algos`'
//! `DiscreteSac::with_learnable_table` trains one. The crate is plain Rust with no
//! network library (no dfdx), so it can be used alone.
//!
//! Modules: `encoding` (the four encodings), `mask` (masks), `scorer` (the chunked
//! scorer and its softmax operations), `soft` (the discrete-SAC operations), `kernels`
//! (the vectorised loops and their runtime dispatch: the crate's only `unsafe`).
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
//!
//! // Discrete SAC: the actor loss and its gradient with respect to q, and the soft value.
//! let (g1, g2) = ([0.1; 8], [0.2; 8]);
//! let (mut loss, mut entropy, mut grad_q) = ([0.0; 2], [0.0; 2], [0.0; 8]);
//! scorer.soft_policy_loss(&q, [&g1, &g2], 0.2, Masks::None, &mut loss, &mut entropy, &mut grad_q)?;
//! let mut value = [0.0; 2];
//! scorer.soft_value(&q, [&g1, &g2], 0.2, Masks::None, &mut value)?;
//! assert!((value[0] + loss[0]).abs() < 1e-4); // V = -J for the same critics
//!
//! // The one-hot head: q holds one score per action.
//! let mut head = ChunkedScorer::identity(1000, 256, 1)?;
//! let logits = vec![0.0; 1000];
//! head.log_softmax(&logits, &[5], Masks::None, &mut logp[..1])?;
//! assert!((logp[0] + (1000f32).ln()).abs() < 1e-4);
//! # Ok(())
//! # }
//! ```

mod encoding;
mod kernels;
mod mask;
mod scorer;

pub use encoding::{ActionEncoding, Binary, Embedding, Index, OneHot};
pub use mask::{ActionMask, Masks};
pub use scorer::{ChunkValues, ChunkedScorer, Join, Sampling, ScorerShape, dot_scores};

/// The `rand` version [`ChunkedScorer::sample`] takes generators of (re-exported so
/// that callers can name the exact traits).
pub use rand;

#[cfg(test)]
#[global_allocator]
static A: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
