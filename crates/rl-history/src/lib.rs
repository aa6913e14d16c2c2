//! History summarizers for partially observed environments: what a policy sees of an
//! environment's past, with memory per environment that is fixed before a run and does
//! not grow with the episode.
//!
//! A history module that keeps the whole episode (Pearl's `LSTMHistorySummarizationModule`
//! re-runs the kept history at every step) grows with the episode until the device runs
//! out. Here every summarizer has a state of constant size per environment, one step
//! costs the same at step 10 and at step 10 million, and training reads bounded windows
//! rebuilt from storage rows, never a second copy of them.
//!
//! - [`Summarizer`]: the interface. Inputs of `N` environments in, policy inputs out,
//!   one step at a time, with a per-environment [`Summarizer::State`] made once for `N`
//!   environments, reset at episode starts, planned before it exists
//!   ([`Summarizer::memory_plan`]) and stepped without allocating.
//! - [`Identity`]: the last input, no memory.
//! - [`Stack`]: the last `k` inputs, a ring of `k` rows per environment while acting;
//!   [`Stack::gather`] rebuilds the same stacks at training time from a storage column,
//!   its episode flags ([`Episodes`]) and sampled row indices ([`StoredRows`]), never
//!   across an episode start ([`Padding`]).
//! - [`Lstm`]: an [`rl_nn::Lstm`] cell; the state per environment is `(h, c)`. Acting is
//!   one cell step for all environments; training runs the cell's window passes
//!   ([`rl_nn::Lstm::forward_sequence`], [`rl_nn::Lstm::backward_sequence`]: truncated
//!   back-propagation through time with resets inside windows), which equal the steps
//!   taken while acting.
//!
//! **Status.** The interface, the three summarizers, stack rebuilding from storage
//! indices and the LSTM cell (rl-nn) with its window passes exist and are tested
//! (finite differences and dfdx for the cell's gradients; a window equals the acting
//! steps within 1e-6; a 1,000,000-step episode allocates nothing per step). rl-algos
//! builds recurrent PPO on them (`RecurrentCategoricalPolicy`, `RecurrentPpo`: the
//! collector's per-environment slot marks episode starts, the rollout records each
//! chunk's initial state, chunked minibatches; the `ppo_masked_cartpole` example). Not
//! yet: recurrent SAC and DQN on the slice sampler with burn-in, and the
//! `sac_large_actions --history lstm` example.
//!
//! # Example
//!
//! ```
//! use rand::SeedableRng;
//! use rl_core::Flag;
//! use rl_history::{Episodes, Lstm, Stack, StoredRows, Summarizer, Written};
//!
//! # fn main() -> rl_history::Result<()> {
//! let envs = 8;
//! let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
//! // An LSTM summarizer of 4-element observations into 32 features, for 8 environments:
//! // its memory is known before the state exists, and never grows.
//! let lstm = Lstm::new(4, 32, &mut rng)?;
//! println!("{}", lstm.memory_plan("history", envs));
//! let mut state = lstm.state(envs);
//! let mut features = vec![0.0; envs * 32];
//! let mut starts = vec![true; envs]; // every environment starts an episode
//! for step in 0..100 {
//!     let obs = vec![step as f32 * 0.01; envs * 4];
//!     lstm.step(&mut state, &obs, &starts, &mut features)?; // allocates nothing
//!     starts.fill(false);
//! }
//!
//! // Frame stacks rebuilt at training time from the one stored observation column.
//! let stack = Stack::new(2, 3)?; // the last 3 of 2-element observations
//! let obs = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]; // 4 rows, one environment
//! let starts = [true, false, true, false].map(Flag::new); // an episode starts at row 2
//! let stored = StoredRows {
//!     obs: &obs,
//!     episodes: Episodes::Starts(&starts),
//!     stride: 1,
//!     written: Written::All,
//! };
//! let mut stacks = [0.0; 2 * 6];
//! stack.gather(&stored, &[1, 3], &mut stacks)?;
//! assert_eq!(stacks, [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 4.0, 4.0]);
//! # Ok(()) }
//! ```

mod error;
mod lstm;
mod stack;
mod summarizer;

pub use error::{Error, Result};
pub use lstm::Lstm;
pub use stack::{Episodes, Padding, Stack, StackState, StoredRows, Written};
pub use summarizer::{Identity, IdentityState, Summarizer};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
