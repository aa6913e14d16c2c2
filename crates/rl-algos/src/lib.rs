//! Learning algorithms with bounded memory, every network on `rl-nn`: PPO, SAC
//! (continuous and discrete), DQN, and their recurrent forms. The loops that drive them
//! (trainers, evaluation, run directories) are `rl-train`'s.
//!
//! One module per concern:
//!
//! - [`learner`]: the contract a trainer drives ([`OnPolicyLearner`](learner::OnPolicyLearner),
//!   [`OffPolicyLearner`](learner::OffPolicyLearner)).
//! - [`policy`]: the actor-critic policies PPO trains
//!   ([`CategoricalPolicy`](policy::CategoricalPolicy),
//!   [`GaussianPolicy`](policy::GaussianPolicy)) with sizes, activation and initialisation
//!   chosen at run time, the traits PPO needs of them, and the recurrent
//!   [`RecurrentCategoricalPolicy`](policy::RecurrentCategoricalPolicy) (an `rl-history`
//!   summarizer before its heads: an LSTM, a stack of observations, or nothing).
//! - [`ppo`]: [`Ppo`](ppo::Ppo), its [`PpoConfig`](ppo::PpoConfig), the advantages (GAE
//!   computed once per update, optional reward normalisation) and the losses as
//!   loss-and-gradient functions; [`RecurrentPpo`](ppo::RecurrentPpo) trains the
//!   recurrent policy on chunks of the rollout replayed from their recorded start
//!   states (truncated back-propagation through time).
//! - [`sac`]: [`Sac`](sac::Sac) for box actions (Stable-Baselines3's semantics) and
//!   [`DiscreteSac`](sac::DiscreteSac), exact expectations over 100 000 actions in
//!   chunks, fixed or learned action tables, action masks.
//! - [`dqn`]: [`Dqn`](dqn::Dqn): double Q-learning, hard or polyak targets, epsilon
//!   schedule, Huber loss, prioritized replay.
//! - [`sequence`]: [`Recurrent`](sequence::Recurrent), a SAC (continuous or discrete)
//!   or DQN behind an `rl-history` summarizer, trained on windows of consecutive steps
//!   replayed from the buffer with a burn-in.
//! - [`td3`]: [`Td3`](td3::Td3), twin delayed DDPG for box actions on SAC's twin
//!   critics: target policy smoothing, delayed actor and target updates.
//! - [`predict`]: [`Predict`](predict::Predict), deterministic actions of every trained
//!   policy and learner.
//!
//! Every trainer writes the one checkpoint layout of `rl-nn` ([`Checkpoint`]: named
//! networks with their weights and Adam states, plus the trainer's typed state), and a
//! restore checks architecture and configuration before it changes anything.
//! [`Error`] and [`Result`] are the crate's error type.

pub mod dqn;
mod error;
pub mod learner;
pub mod policy;
pub mod ppo;
pub mod predict;
pub mod sac;
pub mod sequence;
pub mod td3;

pub use error::{Error, Key, Result};
/// The network layer's types that appear in this crate's signatures.
pub use rl_nn::{Activation, AdamConfig, Checkpoint};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
