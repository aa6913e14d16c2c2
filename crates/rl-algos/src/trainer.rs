//! Trainers that own the loop: environments -> collector -> buffer -> learner -> the
//! collector's policy, with a memory plan checked before anything is allocated,
//! evaluation and checkpoints on a cadence, callbacks and a typed summary.

mod learner;

pub use learner::OffPolicyLearner;
