//! [`Network`]: the one network type a learner holds when its input may be a vector
//! (an [`Mlp`]) or an image (a [`ConvNet`]), and [`Observation`], the element types a
//! network reads its input rows as (`f32` vectors, `u8` frames).

use std::fmt;
use std::sync::Arc;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::{
    Architecture, CnnSpec, CnnWorkspace, ConvNet, Init, Mlp, MlpSpec, MlpWorkspace, Module, Pool,
    TensorSpec, Weights,
};

/// What a [`Network`] is: a multilayer perceptron over vectors or a convolutional
/// network over images.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NetworkSpec {
    /// An [`Mlp`].
    Mlp(MlpSpec),
    /// A [`ConvNet`].
    Cnn(CnnSpec),
}

impl NetworkSpec {
    /// Checks the spec.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field.
    pub fn validate(&self) -> Result<()> {
        match self {
            Self::Mlp(s) => s.validate(),
            Self::Cnn(s) => s.validate(),
        }
    }

    /// Parameters, `None` on overflow.
    pub fn checked_num_params(&self) -> Option<usize> {
        match self {
            Self::Mlp(s) => s.checked_num_params(),
            Self::Cnn(s) => s.checked_num_params(),
        }
    }

    /// Bytes of a workspace for `max_rows` rows, `None` on overflow.
    pub fn workspace_bytes(&self, max_rows: usize) -> Option<u64> {
        match self {
            Self::Mlp(s) => s.workspace_bytes(max_rows),
            Self::Cnn(s) => s.workspace_bytes(max_rows),
        }
    }

    /// Elements of one input row.
    pub fn input_len(&self) -> usize {
        match self {
            Self::Mlp(s) => s.sizes[0],
            Self::Cnn(s) => s.input_len(),
        }
    }
}

impl fmt::Display for NetworkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mlp(s) => Architecture::mlp(s).fmt(f),
            Self::Cnn(s) => s.fmt(f),
        }
    }
}

/// An [`Mlp`] or a [`ConvNet`] behind one [`Module`]: what a policy or Q-function holds
/// when its encoder is chosen at run time. Checkpoints see the inner network's
/// [`Architecture`] and tensors unchanged.
#[derive(Clone, Debug, PartialEq)]
pub enum Network {
    /// A multilayer perceptron.
    Mlp(Mlp),
    /// A convolutional network.
    Cnn(ConvNet),
}

impl Network {
    /// A network of `spec`, initialised by `init` from `rng`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid spec or initialisation.
    pub fn new<R: Rng + ?Sized>(spec: NetworkSpec, init: Init, rng: &mut R) -> Result<Self> {
        Ok(match spec {
            NetworkSpec::Mlp(s) => Self::Mlp(Mlp::new(s, init, rng)?),
            NetworkSpec::Cnn(s) => Self::Cnn(ConvNet::new(s, init, rng)?),
        })
    }

    /// The spec it was built from.
    pub fn spec(&self) -> NetworkSpec {
        match self {
            Self::Mlp(n) => NetworkSpec::Mlp(n.spec().clone()),
            Self::Cnn(n) => NetworkSpec::Cnn(n.spec().clone()),
        }
    }

    /// Whether `other` is a network of the same spec (nothing allocated, unlike
    /// comparing [`Network::spec`]s).
    pub fn same_spec(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Mlp(a), Self::Mlp(b)) => a.spec() == b.spec(),
            (Self::Cnn(a), Self::Cnn(b)) => a.spec() == b.spec(),
            _ => false,
        }
    }

    /// Multiplies the output layer's weights by `scale` and zeroes its bias.
    pub fn scale_output_layer(&mut self, scale: f32) {
        match self {
            Self::Mlp(n) => n.scale_output_layer(scale),
            Self::Cnn(n) => n.scale_output_layer(scale),
        }
    }

    /// The forward pass over input rows of element type `O` ([`Observation`]).
    ///
    /// # Errors
    /// As [`Module::forward`]; [`Error::Config`] for frames of bytes into an [`Mlp`].
    pub fn forward_obs<'w, O: Observation>(
        &self,
        input: &[O],
        rows: usize,
        ws: &'w mut NetworkWorkspace,
    ) -> Result<&'w [f32]> {
        O::forward(self, input, rows, ws)
    }
}

impl Weights for Network {
    fn architecture(&self) -> Architecture {
        match self {
            Self::Mlp(n) => n.architecture(),
            Self::Cnn(n) => n.architecture(),
        }
    }

    fn params(&self) -> &[f32] {
        match self {
            Self::Mlp(n) => n.params(),
            Self::Cnn(n) => n.params(),
        }
    }

    fn params_mut(&mut self) -> &mut [f32] {
        match self {
            Self::Mlp(n) => n.params_mut(),
            Self::Cnn(n) => n.params_mut(),
        }
    }

    fn tensors(&self) -> Vec<TensorSpec> {
        match self {
            Self::Mlp(n) => n.tensors(),
            Self::Cnn(n) => n.tensors(),
        }
    }
}

/// The workspace of a [`Network`]: its inner network's.
#[derive(Clone, Debug)]
pub enum NetworkWorkspace {
    /// An [`Mlp`]'s.
    Mlp(MlpWorkspace),
    /// A [`ConvNet`]'s.
    Cnn(CnnWorkspace),
}

impl NetworkWorkspace {
    /// Outputs of the last forward pass (`rows x output_dim`).
    pub fn output(&self) -> &[f32] {
        match self {
            Self::Mlp(w) => w.output(),
            Self::Cnn(w) => w.output(),
        }
    }

    /// Rows of the last forward pass.
    pub fn rows(&self) -> usize {
        match self {
            Self::Mlp(w) => w.rows(),
            Self::Cnn(w) => w.rows(),
        }
    }

    /// Largest batch.
    pub fn max_rows(&self) -> usize {
        match self {
            Self::Mlp(w) => w.max_rows(),
            Self::Cnn(w) => w.max_rows(),
        }
    }

    /// Runs the passes on `pool`'s threads (`None`: on the calling thread).
    pub fn set_pool(&mut self, pool: Option<Arc<Pool>>) {
        match self {
            Self::Mlp(w) => w.set_pool(pool),
            Self::Cnn(w) => w.set_pool(pool),
        }
    }

    /// The pool the passes run on, if any.
    pub fn pool(&self) -> Option<&Arc<Pool>> {
        match self {
            Self::Mlp(w) => w.pool(),
            Self::Cnn(w) => w.pool(),
        }
    }

    /// Bytes held by its buffers.
    pub fn memory_bytes(&self) -> u64 {
        match self {
            Self::Mlp(w) => w.memory_bytes(),
            Self::Cnn(w) => w.memory_bytes(),
        }
    }
}

fn workspace_mismatch(net: &Network, ws: &NetworkWorkspace) -> Error {
    let found = match ws {
        NetworkWorkspace::Mlp(_) => "an mlp's workspace",
        NetworkWorkspace::Cnn(_) => "a cnn's workspace",
    };
    Error::ArchitectureMismatch {
        what: format!("workspace ({found})"),
        expected: net.architecture(),
        found: net.architecture(),
    }
}

impl Module for Network {
    type Workspace = NetworkWorkspace;

    fn input_dim(&self) -> usize {
        match self {
            Self::Mlp(n) => n.input_dim(),
            Self::Cnn(n) => n.input_dim(),
        }
    }

    fn output_dim(&self) -> usize {
        match self {
            Self::Mlp(n) => n.output_dim(),
            Self::Cnn(n) => n.output_dim(),
        }
    }

    fn workspace(&self, max_rows: usize) -> NetworkWorkspace {
        match self {
            Self::Mlp(n) => NetworkWorkspace::Mlp(n.workspace(max_rows)),
            Self::Cnn(n) => NetworkWorkspace::Cnn(n.workspace(max_rows)),
        }
    }

    fn workspace_bytes(&self, max_rows: usize) -> u64 {
        match self {
            Self::Mlp(n) => n.workspace_bytes(max_rows),
            Self::Cnn(n) => n.workspace_bytes(max_rows),
        }
    }

    fn forward<'w>(
        &self,
        input: &[f32],
        rows: usize,
        ws: &'w mut NetworkWorkspace,
    ) -> Result<&'w [f32]> {
        match (self, ws) {
            (Self::Mlp(n), NetworkWorkspace::Mlp(w)) => n.forward(input, rows, w),
            (Self::Cnn(n), NetworkWorkspace::Cnn(w)) => n.forward(input, rows, w),
            (net, ws) => Err(workspace_mismatch(net, ws)),
        }
    }

    fn backward(
        &self,
        ws: &mut NetworkWorkspace,
        output_grads: &[f32],
        param_grads: Option<&mut [f32]>,
        input_grads: Option<&mut [f32]>,
    ) -> Result<()> {
        match (self, ws) {
            (Self::Mlp(n), NetworkWorkspace::Mlp(w)) => {
                n.backward(w, output_grads, param_grads, input_grads)
            }
            (Self::Cnn(n), NetworkWorkspace::Cnn(w)) => {
                n.backward(w, output_grads, param_grads, input_grads)
            }
            (net, ws) => Err(workspace_mismatch(net, ws)),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u8 {}
}

/// An element type networks read observations as: `f32` vectors (any [`Network`]) or
/// `u8` frames (a [`ConvNet`], through [`ConvNet::forward_u8`], so frames are never
/// stored as `f32` images).
pub trait Observation: rl_core::Element + Copy + sealed::Sealed + 'static {
    /// The forward pass of `net` over `rows` rows of `input`.
    ///
    /// # Errors
    /// As [`Module::forward`]; [`Error::Config`] for frames of bytes into an [`Mlp`].
    fn forward<'w>(
        net: &Network,
        input: &[Self],
        rows: usize,
        ws: &'w mut NetworkWorkspace,
    ) -> Result<&'w [f32]>;

    /// The rows as `f32` when they are (`None` for bytes): what an observation
    /// normaliser reads.
    fn as_f32(input: &[Self]) -> Option<&[f32]>;
}

impl Observation for f32 {
    fn forward<'w>(
        net: &Network,
        input: &[f32],
        rows: usize,
        ws: &'w mut NetworkWorkspace,
    ) -> Result<&'w [f32]> {
        net.forward(input, rows, ws)
    }

    fn as_f32(input: &[f32]) -> Option<&[f32]> {
        Some(input)
    }
}

impl Observation for u8 {
    fn forward<'w>(
        net: &Network,
        input: &[u8],
        rows: usize,
        ws: &'w mut NetworkWorkspace,
    ) -> Result<&'w [f32]> {
        match (net, ws) {
            (Network::Cnn(n), NetworkWorkspace::Cnn(w)) => n.forward_u8(input, rows, w),
            (Network::Mlp(_), _) => Err(Error::config(
                "network input",
                "is frames of bytes (u8) but the network is an mlp: pick a convolutional \
                 encoder (policy.encoder = \"nature_cnn\" for 84x84 Atari frames, \
                 \"small_cnn\" for small grids)",
            )),
            (net, ws) => Err(workspace_mismatch(net, ws)),
        }
    }

    fn as_f32(_input: &[u8]) -> Option<&[f32]> {
        None
    }
}

#[cfg(test)]
mod tests;
