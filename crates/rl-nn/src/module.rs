//! What every network of the layer is: flat parameters, named tensors, an architecture
//! that identifies it, and forward and backward passes through a preallocated
//! workspace.

use std::fmt;

use rl_core::{Location, MemoryPlan};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::{Activation, CnnSpec, MlpSpec};

/// What a network is, as a typed, comparable value: checkpoints and weight files record
/// it, and loading weights of another architecture is refused even where tensor shapes
/// agree (ReLU against tanh).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum Architecture {
    /// A multilayer perceptron ([`Mlp`](crate::Mlp)).
    Mlp {
        /// Layer widths, input first.
        sizes: Vec<usize>,
        /// The nonlinearity between layers.
        activation: Activation,
    },
    /// A long short-term memory cell ([`Lstm`](crate::Lstm)).
    Lstm {
        /// Elements of one input row.
        input: usize,
        /// Elements of the hidden and cell states.
        hidden: usize,
    },
    /// A convolutional network ([`ConvNet`](crate::ConvNet)), by its spec (boxed: the
    /// spec is larger than the other variants).
    Cnn(Box<CnnSpec>),
    /// One free trainable tensor (a Gaussian policy's log standard deviations, a
    /// temperature), a [`Parameters`](crate::Parameters).
    Tensor {
        /// Its shape.
        shape: Vec<usize>,
    },
}

impl Architecture {
    /// The architecture of an MLP of this spec.
    pub fn mlp(spec: &MlpSpec) -> Self {
        Self::Mlp {
            sizes: spec.sizes.clone(),
            activation: spec.activation,
        }
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mlp { sizes, activation } => {
                f.write_str("mlp ")?;
                for (i, s) in sizes.iter().enumerate() {
                    if i > 0 {
                        f.write_str("-")?;
                    }
                    write!(f, "{s}")?;
                }
                write!(f, " {activation}")
            }
            Self::Lstm { input, hidden } => write!(f, "lstm {input}-{hidden}"),
            Self::Cnn(spec) => write!(f, "cnn {spec}"),
            Self::Tensor { shape } => write!(f, "tensor {shape:?}"),
        }
    }
}

/// One named tensor inside a network's flat parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    /// Its name, as PyTorch names it in the equivalent module (`"0.weight"`, `"0.bias"`,
    /// `"2.weight"` ... for an `nn.Sequential`).
    pub name: String,
    /// Its shape (`[out, in]` for a weight, `[out]` for a bias).
    pub shape: Vec<usize>,
    /// Where its first element sits in the flat parameters.
    pub offset: usize,
}

impl TensorSpec {
    /// Elements: the product of the shape.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its range in the flat parameters.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len()
    }
}

/// Whether a network's memory plan counts what training adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// Parameters and a workspace.
    Inference,
    /// Parameters, gradients, Adam's two moments and a workspace.
    Training,
}

/// Named trainable tensors in one flat `f32` vector, identified by an
/// [`Architecture`]: what checkpoints, weight files, optimisers and polyak averaging see.
pub trait Weights {
    /// What the parameters belong to.
    fn architecture(&self) -> Architecture;

    /// All parameters, tensor after tensor ([`Weights::tensors`]).
    fn params(&self) -> &[f32];

    /// All parameters, mutably.
    fn params_mut(&mut self) -> &mut [f32];

    /// Number of parameters.
    fn num_params(&self) -> usize {
        self.params().len()
    }

    /// The named tensors the parameters are made of, in order.
    fn tensors(&self) -> Vec<TensorSpec>;
}

/// A network of the layer: flat `f32` parameters made of named tensors, and passes over
/// batches of rows through a workspace allocated once for the largest batch.
///
/// `forward` keeps in the workspace what `backward` needs; `backward` adds parameter
/// gradients into a caller's buffer (so several passes accumulate) and writes input
/// gradients. Neither allocates.
///
/// A recurrent cell ([`Lstm`](crate::Lstm)) fits the same shape: its workspace also
/// carries the recurrent state of every row between calls, so one `forward` is one time
/// step from the carried state (state in, state out) and `backward` is that step's
/// (gradients stop at the carried state); resetting a row's state is a method of its
/// workspace ([`LstmWorkspace::reset_row`](crate::LstmWorkspace::reset_row)). Its
/// sequence passes keep the steps of a window in a workspace sized for the longest window
/// and walk them in reverse (truncated back-propagation through time).
pub trait Module: Weights {
    /// Activations (and for recurrent cells, carried state) for batches of up to a
    /// given number of rows.
    type Workspace: fmt::Debug + Send;

    /// Elements of one input row.
    fn input_dim(&self) -> usize;

    /// Elements of one output row.
    fn output_dim(&self) -> usize;

    /// A workspace for batches of up to `max_rows` rows.
    fn workspace(&self, max_rows: usize) -> Self::Workspace;

    /// Bytes of a workspace for `max_rows` rows (what [`Module::workspace`] allocates).
    fn workspace_bytes(&self, max_rows: usize) -> u64;

    /// The forward pass over `rows` rows of input (`rows x input_dim`, row-major); the
    /// outputs (`rows x output_dim`) live in `ws` until its next forward pass.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) for an input of the wrong
    /// length or more rows than the workspace holds;
    /// [`Error::ArchitectureMismatch`](crate::Error::ArchitectureMismatch) for a
    /// workspace of another network.
    fn forward<'w>(
        &self,
        input: &[f32],
        rows: usize,
        ws: &'w mut Self::Workspace,
    ) -> Result<&'w [f32]>;

    /// The backward pass of the last forward pass through `ws`, given the gradient of a
    /// loss with respect to the outputs. Adds parameter gradients into `param_grads`
    /// (if given, [`Weights::num_params`] long) and writes input gradients into
    /// `input_grads` (if given, `rows x input_dim`).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) for buffers of the wrong
    /// length; [`Error::ArchitectureMismatch`](crate::Error::ArchitectureMismatch) for a
    /// workspace of another network.
    fn backward(
        &self,
        ws: &mut Self::Workspace,
        output_grads: &[f32],
        param_grads: Option<&mut [f32]>,
        input_grads: Option<&mut [f32]>,
    ) -> Result<()>;

    /// What the network costs, under `name`: its parameters, a workspace of `max_rows`
    /// rows and, for [`Usage::Training`], a gradient buffer and Adam's two moments.
    fn memory_plan(&self, name: &str, max_rows: usize, usage: Usage) -> MemoryPlan {
        network_plan(
            name,
            self.num_params(),
            usage,
            &format!("workspace ({max_rows} rows)"),
            self.workspace_bytes(max_rows),
        )
    }
}

/// Parameters, for [`Usage::Training`] gradients and Adam's two moments, and one
/// workspace line, under `name`.
pub(crate) fn network_plan(
    name: &str,
    num_params: usize,
    usage: Usage,
    workspace: &str,
    workspace_bytes: u64,
) -> MemoryPlan {
    let bytes = (num_params * size_of::<f32>()) as u64;
    let mut plan = MemoryPlan::new().with(format!("{name}/parameters"), Location::Ram, bytes);
    if usage == Usage::Training {
        plan.add(format!("{name}/gradients"), Location::Ram, bytes);
        plan.add(format!("{name}/adam moments"), Location::Ram, 2 * bytes);
    }
    plan.add(
        format!("{name}/{workspace}"),
        Location::Ram,
        workspace_bytes,
    );
    plan
}
