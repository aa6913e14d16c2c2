//! Adam with state we own (so checkpoints can resume exactly), and global gradient-norm
//! clipping.
//!
//! dfdx 0.13 keeps its Adam's moments and step counter private, so a checkpoint written
//! through dfdx cannot resume training where it stopped. [`Adam`] here computes the same
//! numbers as `dfdx::optim::Adam` (bit for bit on the CPU: it mirrors the arithmetic of
//! dfdx's CPU kernel operation by operation, see the tests) and exposes its state as an
//! [`AdamState`] that serialises with serde.
//!
//! # State layout
//!
//! The moments are one flat `Vec<f32>` per trainable tensor, in the order
//! [`TensorCollection::iter_tensors`] visits the model (dfdx's own optimisers and
//! `num_trainable_params` walk the same order). Tensors that dfdx marks as not updated by
//! gradients (batch-norm running statistics) have no moments. This layout:
//!
//! - is the serialised layout itself: saving and loading is a move or a copy, with no
//!   mapping step in between;
//! - does not depend on tensor ids: dfdx's Adam keys its moments by each tensor's unique
//!   id, so swapping in a freshly loaded model (new ids) silently restarts its moments
//!   from zero. Here a model of the same type always has the same tensors in the same
//!   order, so loading weights into a fresh model and swapping it in keeps the optimiser
//!   valid;
//! - lets [`Adam::load_state`] check every tensor's length before it changes anything.

use std::{convert::Infallible, fmt, marker::PhantomData};

use dfdx::{
    nn::tensor_collection::{
        RecursiveWalker, TensorCollection, TensorOptions, TensorVisitor, ViewTensorMut,
        ViewTensorRef,
    },
    shapes::{HasShape, Shape},
    tensor::{Cpu, Gradients, Tensor},
};
use rl_core::{Location, MemoryPlan};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Hyperparameters of [`Adam`].
///
/// The defaults are the ones PPO implementations use (Stable-Baselines3's `PPO`, CleanRL's
/// `ppo.py`), which differ from PyTorch's and dfdx's Adam defaults in `lr` and `eps`:
///
/// | field | default | PyTorch / dfdx default |
/// | --- | --- | --- |
/// | `lr` | `3e-4` | `1e-3` |
/// | `betas` | `[0.9, 0.999]` | same |
/// | `eps` | `1e-5` | `1e-8` |
/// | `weight_decay` | `None` | same |
///
/// Validated by [`AdamConfig::validate`] (and by [`Adam::new`]): every value finite,
/// `lr > 0`, `0 <= beta < 1`, `eps > 0`, `weight_decay >= 0`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamConfig {
    /// Learning rate (step size). Default `3e-4`. Change it between steps with
    /// [`Adam::set_lr`] for schedules.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates. Default `[0.9, 0.999]`.
    pub betas: [f64; 2],
    /// Added to the square root of the second moment before dividing, for numerical
    /// stability. Default `1e-5` (PPO implementations; PyTorch's default is `1e-8`).
    pub eps: f64,
    /// L2 penalty added to the gradient before the moments are updated (`g + wd * p`),
    /// as in PyTorch's `Adam(weight_decay=...)` and dfdx's `WeightDecay::L2`. Default
    /// `None`.
    pub weight_decay: Option<f64>,
}

impl Default for AdamConfig {
    fn default() -> Self {
        Self {
            lr: 3e-4,
            betas: [0.9, 0.999],
            eps: 1e-5,
            weight_decay: None,
        }
    }
}

/// Whether a learning rate of exactly zero is accepted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ZeroLr {
    Refused,
    Allowed,
}

impl AdamConfig {
    /// Checks every value: finite, `lr > 0`, `0 <= beta < 1`, `eps > 0`,
    /// `weight_decay >= 0`. The error names the field.
    pub fn validate(&self) -> Result<()> {
        self.check(ZeroLr::Refused)
    }

    fn check(&self, zero_lr: ZeroLr) -> Result<()> {
        check_lr(self.lr, zero_lr)?;
        for (i, beta) in self.betas.into_iter().enumerate() {
            if !(0.0..1.0).contains(&beta) {
                return Err(Error::config(
                    format!("adam.betas[{i}]"),
                    format!("is {beta} but must be in [0, 1): 0.9 and 0.999 are the usual values"),
                ));
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(Error::config(
                "adam.eps",
                format!("is {} but must be finite and above 0: try 1e-5", self.eps),
            ));
        }
        if let Some(wd) = self.weight_decay
            && !(wd.is_finite() && wd >= 0.0)
        {
            return Err(Error::config(
                "adam.weight_decay",
                format!("is {wd} but must be finite and at least 0: use None for no decay"),
            ));
        }
        Ok(())
    }
}

fn check_lr(lr: f64, zero_lr: ZeroLr) -> Result<()> {
    let ok = lr.is_finite()
        && match zero_lr {
            ZeroLr::Refused => lr > 0.0,
            ZeroLr::Allowed => lr >= 0.0,
        };
    if ok {
        return Ok(());
    }
    let bound = match zero_lr {
        ZeroLr::Refused => "above 0",
        ZeroLr::Allowed => "at least 0",
    };
    Err(Error::config(
        "adam.lr",
        format!("is {lr} but must be finite and {bound}: 3e-4 is the usual PPO value"),
    ))
}

/// Everything [`Adam`] needs to continue exactly where it stopped: the step counter, both
/// moments and the configuration (with the learning rate last set).
///
/// `first[i]` and `second[i]` belong to the model's `i`-th trainable tensor, in the
/// order `TensorCollection::iter_tensors` visits the model (the order of dfdx's own
/// optimisers); tensors dfdx does not update from gradients (batch-norm running
/// statistics) have none. The layout is independent of tensor ids, unlike dfdx's Adam,
/// which keys its moments by tensor id: a state loads into any model of the same type,
/// for instance a fresh one that checkpoint weights were loaded into.
///
/// Serialises with serde; with `serde_json`'s `float_roundtrip` feature (the workspace's
/// setting) a JSON round trip is exact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamState {
    /// Updates applied so far (bias correction uses it).
    pub t: u64,
    /// First-moment estimates, one vector per trainable tensor.
    pub first: Vec<Vec<f32>>,
    /// Second-moment estimates, one vector per trainable tensor.
    pub second: Vec<Vec<f32>>,
    /// The hyperparameters, including the current learning rate.
    pub config: AdamConfig,
}

/// Adam (Kingma and Ba, 2015) over a dfdx model `M` on the CPU, with state it owns.
///
/// Numerically identical to `dfdx::optim::Adam` with the same configuration
/// (`weight_decay: Some(wd)` is dfdx's `WeightDecay::L2(wd)`). Unlike dfdx's, its state
/// can be saved ([`Adam::state`]) and restored ([`Adam::load_state`]), it allocates all
/// its memory in [`Adam::new`] ([`Adam::memory_plan`]), and it keeps working when the
/// model is replaced by another value of the same type.
///
/// # Example
///
/// ```
/// use dfdx::prelude::*;
/// use rl_algos::{Adam, AdamConfig, clip_grad_norm};
///
/// # fn main() -> rl_algos::Result<()> {
/// type Mlp = (Linear<4, 16>, ReLU, Linear<16, 2>);
/// let dev = Cpu::default();
/// let mut model = dev.build_module::<Mlp, f32>();
/// let mut opt = Adam::new(&model, AdamConfig::default())?;
/// let x: Tensor<Rank2<8, 4>, f32, _> = dev.sample_normal();
/// let y: Tensor<Rank2<8, 2>, f32, _> = dev.sample_normal();
///
/// let mut grads = model.alloc_grads();
/// for _ in 0..10 {
///     let loss = mse_loss(model.forward_mut(x.trace(grads)), y.clone());
///     grads = loss.backward();
///     let _norm_before_clipping = clip_grad_norm(&model, &mut grads, 0.5)?;
///     opt.update(&mut model, &grads)?;
///     model.zero_grads(&mut grads);
/// }
/// let state = opt.state(); // moments, step counter and config: put it in the checkpoint
/// assert_eq!(state.t, 10);
///
/// let mut resumed = Adam::new(&model, AdamConfig::default())?;
/// resumed.load_state(state)?;
/// # Ok(()) }
/// ```
pub struct Adam<M> {
    config: AdamConfig,
    t: u64,
    first: Vec<Vec<f32>>,
    second: Vec<Vec<f32>>,
    /// Scratch for one parameter tensor (the largest), reused by every update.
    param_buf: Vec<f32>,
    /// Scratch for one gradient tensor (the largest), reused by every update.
    grad_buf: Vec<f32>,
    model: PhantomData<fn(&M)>,
}

impl<M> fmt::Debug for Adam<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Adam")
            .field("config", &self.config)
            .field("t", &self.t)
            .field("tensors", &self.first.len())
            .field("params", &self.num_params())
            .finish_non_exhaustive()
    }
}

impl<M> Clone for Adam<M> {
    fn clone(&self) -> Self {
        Self {
            config: self.config,
            t: self.t,
            first: self.first.clone(),
            second: self.second.clone(),
            param_buf: self.param_buf.clone(),
            grad_buf: self.grad_buf.clone(),
            model: PhantomData,
        }
    }
}

impl<M: TensorCollection<f32, Cpu>> Adam<M> {
    /// An optimiser for models shaped like `model`, with zeroed moments and step 0.
    ///
    /// Allocates everything it will use: both moments and two scratch buffers the size of
    /// the largest tensor (see [`Adam::memory_plan`]). Fails if `config` is invalid.
    pub fn new(model: &M, config: AdamConfig) -> Result<Self> {
        config.validate()?;
        let lengths = tensor_lengths(model);
        let largest = lengths.iter().copied().max().unwrap_or(0);
        Ok(Self {
            config,
            t: 0,
            first: lengths.iter().map(|&n| vec![0.0; n]).collect(),
            second: lengths.iter().map(|&n| vec![0.0; n]).collect(),
            param_buf: vec![0.0; largest],
            grad_buf: vec![0.0; largest],
            model: PhantomData,
        })
    }

    /// Applies one Adam step with bias correction to every trainable tensor of `model`.
    ///
    /// `grads` is what `loss.backward()` returned for a forward pass traced with
    /// `model.alloc_grads()` (possibly clipped with [`clip_grad_norm`]). Parameters that did
    /// not reach the loss have zero gradients there and are still stepped by their
    /// momentum, as in dfdx and PyTorch.
    ///
    /// Each tensor's parameters and gradient are copied into scratch buffers, updated,
    /// and copied back: dfdx 0.13 gives no public mutable access to a tensor's storage.
    /// Besides the planned buffers, one transient copy of one gradient tensor is live at
    /// a time (`Gradients::get` clones).
    ///
    /// # Errors
    ///
    /// [`Error::StateMismatch`] if a tensor of `model` has another length than this
    /// optimiser's (impossible for models built from dfdx's modules, whose shapes are
    /// compile-time constants; checked anyway).
    ///
    /// # Panics
    ///
    /// If `grads` holds no gradient for a trainable tensor of `model` (dfdx's
    /// `Gradients::get` panics). Gradients allocated with `model.alloc_grads()` hold one
    /// for every trainable tensor.
    pub fn update(&mut self, model: &mut M, grads: &Gradients<f32, Cpu>) -> Result<()> {
        self.t = self.t.saturating_add(1);
        let mut op = UpdateOp {
            kernel: Kernel::new(&self.config, self.t),
            grads,
            first: &mut self.first,
            second: &mut self.second,
            param_buf: &mut self.param_buf,
            grad_buf: &mut self.grad_buf,
            next: 0,
        };
        M::iter_tensors(&mut RecursiveWalker {
            m: model,
            f: &mut op,
        })?;
        let visited = op.next;
        if visited != self.first.len() {
            return Err(Error::StateTensorCount {
                what: "first-moment",
                expected: visited,
                actual: self.first.len(),
            });
        }
        Ok(())
    }
}

impl<M> Adam<M> {
    /// The configuration, with the learning rate last set.
    pub fn config(&self) -> &AdamConfig {
        &self.config
    }

    /// The current learning rate.
    pub fn lr(&self) -> f64 {
        self.config.lr
    }

    /// Sets the learning rate used by the following updates (for schedules).
    ///
    /// Zero is accepted here (a linear schedule ends at zero; the step then leaves the
    /// parameters unchanged but still advances the moments and the step counter);
    /// negative, NaN and infinite rates are refused and leave the rate unchanged.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        check_lr(lr, ZeroLr::Allowed)?;
        self.config.lr = lr;
        Ok(())
    }

    /// Updates applied so far.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// Number of trainable tensors (the length of [`AdamState::first`]).
    pub fn num_tensors(&self) -> usize {
        self.first.len()
    }

    /// Number of trainable parameters (elements of all trainable tensors).
    pub fn num_params(&self) -> usize {
        self.first.iter().map(Vec::len).sum()
    }

    /// The bytes this optimiser holds, all allocated by [`Adam::new`], plus the transient
    /// gradient copy of [`Adam::update`].
    pub fn memory_plan(&self) -> MemoryPlan {
        let f32_bytes = size_of::<f32>() as u64;
        let params = self.num_params() as u64;
        let largest = self.param_buf.len() as u64;
        MemoryPlan::new()
            .with("adam/first_moment", Location::Ram, params * f32_bytes)
            .with("adam/second_moment", Location::Ram, params * f32_bytes)
            .with("adam/scratch", Location::Ram, 2 * largest * f32_bytes)
            .with(
                "adam/gradient_copy (transient)",
                Location::Ram,
                largest * f32_bytes,
            )
    }

    /// A copy of the state, for a checkpoint.
    pub fn state(&self) -> AdamState {
        AdamState {
            t: self.t,
            first: self.first.clone(),
            second: self.second.clone(),
            config: self.config,
        }
    }

    /// Replaces the state with `state` (from [`Adam::state`], possibly through a file).
    ///
    /// Checks everything first and changes nothing on error: the configuration (a
    /// learning rate of zero is accepted, as in [`Adam::set_lr`]), the number of tensors,
    /// and every tensor's length against this optimiser's model.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an invalid configuration, [`Error::StateTensorCount`] when the
    /// state has another number of tensors, [`Error::StateMismatch`] (naming the first
    /// tensor that differs and both lengths) when a tensor has another length: the state
    /// was saved for another architecture.
    pub fn load_state(&mut self, state: AdamState) -> Result<()> {
        state.config.check(ZeroLr::Allowed)?;
        for (what, moments) in [
            ("first-moment", &state.first),
            ("second-moment", &state.second),
        ] {
            if moments.len() != self.first.len() {
                return Err(Error::StateTensorCount {
                    what,
                    expected: self.first.len(),
                    actual: moments.len(),
                });
            }
            for (tensor, (ours, theirs)) in self.first.iter().zip(moments).enumerate() {
                if ours.len() != theirs.len() {
                    return Err(Error::StateMismatch {
                        tensor,
                        expected: ours.len(),
                        actual: theirs.len(),
                    });
                }
            }
        }
        self.t = state.t;
        self.first = state.first;
        self.second = state.second;
        self.config = state.config;
        Ok(())
    }
}

/// Adam over one flat parameter vector made of several tensors (a [`DenseMlp`](crate::DenseMlp)'s,
/// for SAC), with the arithmetic of [`Adam`] (hence of dfdx and PyTorch) and the same
/// saveable [`AdamState`] (one moment vector per tensor).
#[derive(Clone, Debug)]
pub struct FlatAdam {
    config: AdamConfig,
    t: u64,
    first: Vec<f32>,
    second: Vec<f32>,
    tensor_lengths: Vec<usize>,
}

impl FlatAdam {
    /// Zero moments for parameters made of tensors of `tensor_lengths` elements.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration.
    pub fn new(tensor_lengths: Vec<usize>, config: AdamConfig) -> Result<Self> {
        config.validate()?;
        let total = tensor_lengths.iter().sum();
        Ok(Self {
            config,
            t: 0,
            first: vec![0.0; total],
            second: vec![0.0; total],
            tensor_lengths,
        })
    }

    /// The hyperparameters.
    pub fn config(&self) -> &AdamConfig {
        &self.config
    }

    /// Updates applied so far.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.first.len()
    }

    /// One step: `params -= lr * m_hat / (sqrt(v_hat) + eps)`.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `params` or `grads` is not [`FlatAdam::num_params`] long.
    pub fn update(&mut self, params: &mut [f32], grads: &[f32]) -> Result<()> {
        for (what, len) in [("parameters", params.len()), ("gradients", grads.len())] {
            if len != self.first.len() {
                return Err(Error::ShapeMismatch {
                    what,
                    expected: self.first.len(),
                    actual: len,
                });
            }
        }
        self.t += 1;
        Kernel::new(&self.config, self.t).apply(params, grads, &mut self.first, &mut self.second);
        Ok(())
    }

    /// The moments (bytes: two floats per parameter).
    pub fn memory_plan(&self, name: &str) -> MemoryPlan {
        MemoryPlan::new().with(
            format!("{name}/adam moments"),
            Location::Ram,
            (2 * self.first.len() * size_of::<f32>()) as u64,
        )
    }

    /// A copy of the state, split per tensor as [`Adam::state`] does.
    pub fn state(&self) -> AdamState {
        let split = |flat: &[f32]| {
            let mut start = 0;
            self.tensor_lengths
                .iter()
                .map(|&len| {
                    let tensor = flat[start..start + len].to_vec();
                    start += len;
                    tensor
                })
                .collect()
        };
        AdamState {
            t: self.t,
            first: split(&self.first),
            second: split(&self.second),
            config: self.config,
        }
    }

    /// Replaces the state; checks everything first and changes nothing on error.
    ///
    /// # Errors
    /// As [`Adam::load_state`].
    pub fn load_state(&mut self, state: &AdamState) -> Result<()> {
        state.config.check(ZeroLr::Allowed)?;
        for (what, moments) in [
            ("first-moment", &state.first),
            ("second-moment", &state.second),
        ] {
            if moments.len() != self.tensor_lengths.len() {
                return Err(Error::StateTensorCount {
                    what,
                    expected: self.tensor_lengths.len(),
                    actual: moments.len(),
                });
            }
            for (tensor, (&ours, theirs)) in self.tensor_lengths.iter().zip(moments).enumerate() {
                if ours != theirs.len() {
                    return Err(Error::StateMismatch {
                        tensor,
                        expected: ours,
                        actual: theirs.len(),
                    });
                }
            }
        }
        self.t = state.t;
        self.first = state.first.concat();
        self.second = state.second.concat();
        self.config = state.config;
        Ok(())
    }
}

/// Scales `grads` in place so that the global L2 norm over all trainable tensors of
/// `model` is at most `max_norm`, and returns the norm before scaling.
///
/// Like PyTorch's `clip_grad_norm_`, over every trainable tensor together (the norm is
/// accumulated in `f64`). When the norm exceeds `max_norm` every gradient is multiplied
/// by `max_norm / norm`; otherwise nothing changes. `max_norm = f32::INFINITY` only
/// measures. A non-finite norm (a NaN or infinite gradient) is returned with the
/// gradients left as they are: check `norm.is_finite()` and skip the update.
///
/// A trainable tensor without a gradient in `grads` gets a zero one (dfdx's
/// `Gradients::get_or_alloc_mut`), which does not change the norm.
///
/// # Errors
///
/// [`Error::Config`] if `max_norm` is NaN or not above 0; [`Error::Device`] if allocating
/// a missing gradient fails.
pub fn clip_grad_norm<M: TensorCollection<f32, Cpu>>(
    model: &M,
    grads: &mut Gradients<f32, Cpu>,
    max_norm: f32,
) -> Result<f32> {
    if max_norm.is_nan() || max_norm <= 0.0 {
        return Err(Error::config(
            "max_grad_norm",
            format!("is {max_norm} but must be above 0: 0.5 is the usual PPO value"),
        ));
    }
    let mut squares = SumOfSquares { grads, sum: 0.0 };
    M::iter_tensors(&mut RecursiveWalker {
        m: model,
        f: &mut squares,
    })?;
    let norm = squares.sum.sqrt();
    if norm.is_finite() && norm > f64::from(max_norm) {
        let mut scale = Scale {
            grads: squares.grads,
            factor: (f64::from(max_norm) / norm) as f32,
        };
        M::iter_tensors(&mut RecursiveWalker {
            m: model,
            f: &mut scale,
        })?;
    }
    Ok(norm as f32)
}

/// Lengths of the trainable tensors of `model`, in visiting order.
fn tensor_lengths<M: TensorCollection<f32, Cpu>>(model: &M) -> Vec<usize> {
    let mut op = Lengths(Vec::new());
    let walked: std::result::Result<_, Infallible> = M::iter_tensors(&mut RecursiveWalker {
        m: model,
        f: &mut op,
    });
    match walked {
        Ok(_) => op.0,
        Err(never) => match never {},
    }
}

struct Lengths(Vec<usize>);

impl TensorVisitor<f32, Cpu> for Lengths {
    type Viewer = ViewTensorRef;
    type Err = Infallible;
    type E2 = f32;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, f32, Cpu>,
        t: &Tensor<S, f32, Cpu>,
    ) -> std::result::Result<Option<Tensor<S, f32, Cpu>>, Infallible> {
        if opts.do_gradient_update {
            self.0.push(t.shape().num_elements());
        }
        Ok(None)
    }
}

/// The per-step constants of the Adam update, in `f32` as dfdx's CPU kernel has them.
struct Kernel {
    lr: f32,
    beta1: f32,
    beta2: f32,
    one_minus_beta1: f32,
    one_minus_beta2: f32,
    /// `1 / (1 - beta1^t)`.
    correction1: f32,
    /// `1 / (1 - beta2^t)`.
    correction2: f32,
    eps: f32,
    weight_decay: Option<f32>,
}

impl Kernel {
    fn new(config: &AdamConfig, t: u64) -> Self {
        // dfdx counts steps in an i32; beyond i32::MAX, beta^t is 0 in f32 for any beta < 1.
        let t = i32::try_from(t).unwrap_or(i32::MAX);
        let [beta1, beta2] = config.betas.map(|b| b as f32);
        Self {
            lr: config.lr as f32,
            beta1,
            beta2,
            one_minus_beta1: 1.0 - beta1,
            one_minus_beta2: 1.0 - beta2,
            correction1: (1.0 - beta1.powi(t)).recip(),
            correction2: (1.0 - beta2.powi(t)).recip(),
            eps: config.eps as f32,
            weight_decay: config.weight_decay.map(|wd| wd as f32),
        }
    }

    /// One step over one tensor. Operation for operation the arithmetic of dfdx 0.13's
    /// `AdamKernel` for `Cpu` (`src/tensor_ops/adam/cpu_kernel.rs`), so results are bit
    /// for bit the same: keep it that way (the tests compare with dfdx).
    fn apply(&self, params: &mut [f32], grads: &[f32], first: &mut [f32], second: &mut [f32]) {
        let moments = first.iter_mut().zip(second.iter_mut());
        for ((p, &g), (m, v)) in params.iter_mut().zip(grads).zip(moments) {
            let mut g = g;
            if let Some(wd) = self.weight_decay {
                g += wd * *p;
            }
            *m = *m * self.beta1 + g * self.one_minus_beta1;
            *v = *v * self.beta2 + g * g * self.one_minus_beta2;
            let m_hat = *m * self.correction1;
            let v_hat = *v * self.correction2;
            *p -= self.lr * m_hat / (v_hat.sqrt() + self.eps);
        }
    }
}

struct UpdateOp<'a> {
    kernel: Kernel,
    grads: &'a Gradients<f32, Cpu>,
    first: &'a mut [Vec<f32>],
    second: &'a mut [Vec<f32>],
    param_buf: &'a mut [f32],
    grad_buf: &'a mut [f32],
    /// Index of the next trainable tensor.
    next: usize,
}

impl TensorVisitor<f32, Cpu> for UpdateOp<'_> {
    type Viewer = ViewTensorMut;
    type Err = Error;
    type E2 = f32;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, f32, Cpu>,
        p: &mut Tensor<S, f32, Cpu>,
    ) -> Result<Option<Tensor<S, f32, Cpu>>> {
        if !opts.do_gradient_update {
            return Ok(None);
        }
        let tensor = self.next;
        self.next += 1;
        let n = p.shape().num_elements();
        let (Some(first), Some(second)) = (self.first.get_mut(tensor), self.second.get_mut(tensor))
        else {
            return Err(Error::StateTensorCount {
                what: "first-moment",
                expected: tensor + 1,
                actual: self.first.len(),
            });
        };
        if first.len() != n {
            return Err(Error::StateMismatch {
                tensor,
                expected: n,
                actual: first.len(),
            });
        }
        let grad = &mut self.grad_buf[..n];
        self.grads.get(&*p).copy_into(grad);
        let params = &mut self.param_buf[..n];
        p.copy_into(params);
        self.kernel.apply(params, grad, first, second);
        p.copy_from(params);
        Ok(None)
    }
}

struct SumOfSquares<'a> {
    grads: &'a mut Gradients<f32, Cpu>,
    sum: f64,
}

impl TensorVisitor<f32, Cpu> for SumOfSquares<'_> {
    type Viewer = ViewTensorRef;
    type Err = Error;
    type E2 = f32;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, f32, Cpu>,
        p: &Tensor<S, f32, Cpu>,
    ) -> Result<Option<Tensor<S, f32, Cpu>>> {
        if opts.do_gradient_update {
            self.sum += sum_of_squares(self.grads.get_or_alloc_mut(p)?);
        }
        Ok(None)
    }
}

/// `sum(x^2)` in `f64`, over eight independent accumulators so that the loop vectorises
/// (one running sum is a chain of dependent additions, about 4x slower).
fn sum_of_squares(values: &[f32]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let chunks = values.chunks_exact(lanes.len());
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(x) * f64::from(x);
        }
    }
    let rest: f64 = rest.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    lanes.iter().sum::<f64>() + rest
}

struct Scale<'a> {
    grads: &'a mut Gradients<f32, Cpu>,
    factor: f32,
}

impl TensorVisitor<f32, Cpu> for Scale<'_> {
    type Viewer = ViewTensorRef;
    type Err = Error;
    type E2 = f32;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, f32, Cpu>,
        p: &Tensor<S, f32, Cpu>,
    ) -> Result<Option<Tensor<S, f32, Cpu>>> {
        if opts.do_gradient_update {
            for g in self.grads.get_or_alloc_mut(p)?.iter_mut() {
                *g *= self.factor;
            }
        }
        Ok(None)
    }
}
