//! The one network layer of the workspace: flat `f32` parameters with shapes chosen at
//! run time, forward and backward passes through workspaces allocated once, Adam,
//! gradient clipping, polyak averaging and checkpoints in the safetensors format.
//!
//! Every algorithm of `rl-algos` (PPO's actor-critics, SAC's actors and critics, DQN)
//! and the LSTM of `rl-history` build on this crate; no other network type exists in the
//! workspace, and no third-party tensor type appears in its API (slices of `f32` in and
//! out).
//!
//! - [`Module`] (with [`Weights`]): a network as named tensors in one flat vector, an
//!   [`Architecture`] that identifies it, and passes over batches of rows through a
//!   [`Module::Workspace`] made once for the largest batch: after that, forward and
//!   backward allocate nothing. Recurrent cells fit the same shape (see [`Module`]).
//! - [`Linear`] and [`Mlp`] ([`MlpSpec`]: sizes and [`Activation`]), initialised by
//!   [`Init`] (PyTorch's uniform default, or orthogonal with gains as PPO uses);
//!   [`Parameters`] for a free trainable tensor.
//! - [`Conv2d`] ([`Conv2dSpec`]: NCHW, kernel, stride and padding chosen at run time,
//!   PyTorch's `[out, in, kh, kw]` weight) on the same product through an im2col
//!   [`Conv2dWorkspace`], and [`ConvNet`] ([`CnnSpec`]: convolutions, a flatten, linear
//!   layers; [`CnnSpec::nature_cnn`] and [`CnnSpec::small_cnn`]) with
//!   [`ConvNet::forward_u8`] for frames of bytes scaled by 1/255 inside the first
//!   layer ([`InputScale`]).
//! - [`Lstm`]: a long short-term memory cell in PyTorch's `nn.LSTMCell` layout, with
//!   [`Lstm::step`] for acting (one step for a batch of environments on an [`LstmState`],
//!   cost independent of the episode's length) and [`Lstm::forward_sequence`] /
//!   [`Lstm::backward_sequence`] for training on windows of steps with resets inside
//!   them (truncated back-propagation through time on an [`LstmWorkspace`]).
//! - [`Adam`] with [`AdamConfig`] and a resumable [`AdamState`]; [`clip_grad_norm`];
//!   [`polyak`].
//! - [`Checkpoint`]: named networks (weights and optimiser state) plus a trainer's typed
//!   state, saved as one safetensors file whose tensor names load into PyTorch;
//!   [`save_weights`] and [`load_weights`] for weights alone.
//! - [`matmul`] over strided [`MatRef`] views: the product every layer runs on.
//! - [`Module::memory_plan`]: parameters, gradients, optimiser state and workspace, before
//!   anything is allocated.
//!
//! # Example
//!
//! ```
//! use rl_nn::{Activation, Adam, AdamConfig, Init, Mlp, MlpSpec, Module, Usage, Weights, clip_grad_norm};
//! use rand::SeedableRng;
//!
//! # fn main() -> rl_nn::Result<()> {
//! let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
//! // A 2-32-32-1 regression network: sizes are runtime values.
//! let mut net = Mlp::new(MlpSpec::new(2, &[32, 32], 1, Activation::Tanh), Init::Uniform, &mut rng)?;
//! println!("{}", net.memory_plan("regressor", 64, Usage::Training));
//! let mut ws = net.workspace(64);
//! let mut adam = Adam::new(net.num_params(), AdamConfig { lr: 1e-2, ..AdamConfig::default() })?;
//! let mut grads = vec![0.0; net.num_params()];
//! let x: Vec<f32> = (0..128).map(|i| (i as f32 / 64.0) - 1.0).collect();
//! let target: Vec<f32> = x.chunks(2).map(|p| p[0] * p[1]).collect();
//! let mut out_grads = vec![0.0; 64];
//! for _ in 0..200 {
//!     let out = net.forward(&x, 64, &mut ws)?;
//!     for ((g, &o), &t) in out_grads.iter_mut().zip(out).zip(&target) {
//!         *g = 2.0 * (o - t) / 64.0; // d/do of the mean squared error
//!     }
//!     grads.fill(0.0);
//!     net.backward(&mut ws, &out_grads, Some(&mut grads), None)?;
//!     clip_grad_norm(&mut [&mut grads], 1.0)?;
//!     adam.update(net.params_mut(), &grads)?;
//! }
//! # Ok(()) }
//! ```

mod activation;
mod adam;
mod checkpoint;
mod cnn;
mod conv;
mod error;
mod init;
mod linalg;
mod lstm;
mod mlp;
mod module;
mod network;
mod ops;
mod pool;
mod version;

pub use activation::Activation;
pub use adam::{Adam, AdamConfig, AdamState};
pub use checkpoint::{
    Checkpoint, FORMAT as CHECKPOINT_FORMAT, NetworkState, VERSION as CHECKPOINT_VERSION,
    load_weights, save_weights,
};
pub use cnn::{CnnOutput, CnnSpec, CnnWorkspace, ConvLayer, ConvNet};
pub use conv::{Conv2d, Conv2dSpec, Conv2dWorkspace, InputScale};
pub use error::{Error, Result};
pub use init::Init;
pub use linalg::{Accumulate, FmaPeak, MatRef, fma_peak, matmul, matmul_on};
pub use lstm::{Lstm, LstmState, LstmWorkspace, Sequence, SequenceGrads};
pub use mlp::{Linear, Mlp, MlpSpec, MlpWorkspace, Parameters};
pub use module::{Architecture, Module, TensorSpec, Usage, Weights};
pub use network::{Network, NetworkSpec, NetworkWorkspace, Observation};
pub use ops::{clip_grad_norm, polyak};
pub use pool::{MAX_THREADS, Pool};

#[cfg(test)]
mod tests;

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
