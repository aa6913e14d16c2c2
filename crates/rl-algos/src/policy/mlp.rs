//! The multilayer perceptron both policies are made of, and its activations.

use std::fmt;
use std::marker::PhantomData;

use dfdx::nn::modules::Linear;
use dfdx::prelude::{
    Const, Cpu, Device, Dtype, Module, ModuleVisitor, Shape, Storage, Tape, Tensor,
    TensorCollection,
};

/// The nonlinearity between the layers of an [`Mlp`].
///
/// dfdx evaluates `tanh` one scalar at a time; ReLU is about 4.5 times cheaper for a
/// 4-64-64-2 forward at batch 64 (see `STACK-NOTES.md`), which is why [`Relu`] is the
/// default of both policies.
pub trait Activation: Copy + Default + fmt::Debug + Send + Sync + 'static {
    /// Name for logs and memory plans, e.g. `"relu"`.
    const NAME: &'static str;

    /// Applies the nonlinearity element-wise, keeping the tape.
    fn activate<S: Shape, T: Tape<f32, Cpu>>(x: Tensor<S, f32, Cpu, T>) -> Tensor<S, f32, Cpu, T>;
}

/// `max(x, 0)`: cheap, the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relu;

/// `tanh(x)`: Stable-Baselines3's choice for PPO, about 4.5 times slower here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tanh;

impl Activation for Relu {
    const NAME: &'static str = "relu";

    fn activate<S: Shape, T: Tape<f32, Cpu>>(x: Tensor<S, f32, Cpu, T>) -> Tensor<S, f32, Cpu, T> {
        x.relu()
    }
}

impl Activation for Tanh {
    const NAME: &'static str = "tanh";

    fn activate<S: Shape, T: Tape<f32, Cpu>>(x: Tensor<S, f32, Cpu, T>) -> Tensor<S, f32, Cpu, T> {
        x.tanh()
    }
}

/// `I -> H -> H -> O`: three dfdx [`Linear`] layers with the activation `A` after the
/// first two; the output is linear.
///
/// Initialisation is dfdx's: every weight and bias uniform in `[-1/sqrt(fan_in),
/// 1/sqrt(fan_in)]` (PyTorch's default bound for `nn.Linear`), drawn from the device's
/// seeded generator. The policies rescale their output layers after building (see
/// [`PolicyConfig`](crate::PolicyConfig)).
///
/// It is a dfdx [`TensorCollection`] (for `f32`), so optimisers, `alloc_grads`,
/// `ema` and save/load see its six tensors, in the order `l1`, `l2`, `l3`, each weight
/// before its bias.
pub struct Mlp<const I: usize, const H: usize, const O: usize, A, E: Dtype, D: Storage<E>> {
    /// Input layer, `I -> H`.
    pub l1: Linear<I, H, E, D>,
    /// Hidden layer, `H -> H`.
    pub l2: Linear<H, H, E, D>,
    /// Output layer, `H -> O` (no activation after it).
    pub l3: Linear<H, O, E, D>,
    activation: PhantomData<A>,
}

impl<const I: usize, const H: usize, const O: usize, A, E: Dtype, D: Storage<E>> Clone
    for Mlp<I, H, O, A, E, D>
{
    fn clone(&self) -> Self {
        Self {
            l1: self.l1.clone(),
            l2: self.l2.clone(),
            l3: self.l3.clone(),
            activation: PhantomData,
        }
    }
}

impl<const I: usize, const H: usize, const O: usize, A: Activation, E: Dtype, D: Storage<E>>
    fmt::Debug for Mlp<I, H, O, A, E, D>
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mlp<{I}-{H}-{H}-{O}, {}>", A::NAME)
    }
}

impl<const I: usize, const H: usize, const O: usize, A: Activation, D: Device<f32>>
    TensorCollection<f32, D> for Mlp<I, H, O, A, f32, D>
{
    type To<E2: Dtype, D2: Device<E2>> = Mlp<I, H, O, A, E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, f32, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::module("l1", |s| &s.l1, |s| &mut s.l1),
                Self::module("l2", |s| &s.l2, |s| &mut s.l2),
                Self::module("l3", |s| &s.l3, |s| &mut s.l3),
            ),
            |(l1, l2, l3)| Mlp {
                l1,
                l2,
                l3,
                activation: PhantomData,
            },
        )
    }
}

impl<const I: usize, const H: usize, const O: usize, A: Activation> Mlp<I, H, O, A, f32, Cpu> {
    /// The forward pass over a batch of `rows x I` inputs, with or without a tape.
    pub fn forward_rows<T: Tape<f32, Cpu>>(
        &self,
        x: Tensor<(usize, Const<I>), f32, Cpu, T>,
    ) -> Tensor<(usize, Const<O>), f32, Cpu, T> {
        let x = A::activate(self.l1.forward(x));
        let x = A::activate(self.l2.forward(x));
        self.l3.forward(x)
    }

    /// Multiplies the output layer's weights by `scale` and sets its bias to zero (the
    /// small-head initialisation of PPO implementations).
    pub(crate) fn rescale_output(&mut self, scale: f32) {
        let weights: Vec<f32> = self.l3.weight.as_vec().iter().map(|w| w * scale).collect();
        self.l3.weight.copy_from(&weights);
        self.l3.bias.fill_with_zeros();
    }
}
