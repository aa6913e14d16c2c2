//! Learning algorithms with bounded memory, on dfdx's CPU backend.
//!
//! **Status: skeleton.** The PPO and SAC issues fill this crate. What it will hold:
//!
//! - PPO for discrete and continuous actions: old log-probabilities and values computed
//!   in minibatches of a configured size (identical to the full pass), GAE from the
//!   rollout buffer's in-place scan, clipping, entropy bonus, grad-norm clipping,
//!   resumable checkpoints.
//! - SAC, continuous (tanh-squashed Gaussian, twin critics, automatic entropy tuning) and
//!   discrete (expectations over the full policy distribution, in chunks for huge `n`).
