//! Trainers that own the loop: environments -> collector -> buffer -> learner -> the
//! collector's policy, with the whole run's memory plan checked before anything large is
//! allocated, evaluation and checkpoints on a cadence, callbacks, an early stop on a goal
//! and a typed [`TrainSummary`].
//!
//! - [`OffPolicyTrainer`] drives any [`OffPolicyLearner`] ([`rl_algos::sac::Sac`],
//!   [`rl_algos::sac::DiscreteSac`], [`rl_algos::dqn::Dqn`]) over a replay buffer in RAM or in a
//!   memory-mapped file ([`ReplayLocation`]): random actions for the first
//!   `learning_starts` steps, then `gradient_steps` updates every `train_freq` steps of
//!   every environment, with uniform or prioritized sampling. With the synchronous
//!   collector the learner is the collector's policy, so every update reaches the next
//!   action without a copy; with the asynchronous one ([`CollectorChoice::Async`])
//!   worker threads act with copies of the learner's actor, and the trainer publishes
//!   new weights after every training phase.
//! - [`OnPolicyTrainer`] drives any [`OnPolicyLearner`] ([`rl_algos::ppo::Ppo`] for
//!   feed-forward policies, [`rl_algos::ppo::RecurrentPpo`] for a recurrent one), built
//!   for `run.n_envs` environments: collect a rollout (a recurrent policy recording each chunk's
//!   starting state), scale rewards if configured, update, hand the new weights to the
//!   collector's policy copy.
//!
//! Both read the loop's settings from [`RunConfig`] (budget, seed, goal, evaluation and
//! checkpoint cadence, memory budget); the algorithm configurations hold only the
//! algorithm's knobs. A run saves into one directory (the learner's checkpoint, the
//! replay buffer for off-policy runs, and `run.json` with the counters) and resumes from
//! it; a directory of another run is refused before anything changes.

mod off_policy;
mod on_policy;
#[cfg(test)]
mod recurrent_tests;
#[cfg(test)]
mod resume_tests;
mod run;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod threads_tests;

pub use off_policy::{
    ChunkActor, ChunkCollector, ChunkConfig, ChunkSink, ChunkSource, CollectorChoice, Episode,
    OffPolicyConfig, OffPolicyReplay, OffPolicyTrainer, REPLAY_FILE, ReplayLocation,
};
pub use on_policy::OnPolicyTrainer;
pub use rl_algos::learner::{Learner, OffPolicyLearner, OnPolicyLearner, SequenceSpec};
pub(crate) use run::recover_dir;
pub use run::{
    COLLECTOR_FILE, Callback, CheckpointSchedule, Continuation, Control, EpisodeEnd, EpisodeKind,
    EvalSchedule, Goal, Progress, ProgressLog, RUN_FILE, RunConfig, RunCounters, StopReason,
    TrainSummary,
};
