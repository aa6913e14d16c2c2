//! Adam over flat parameters, with state it owns so that checkpoints resume exactly.

#![allow(
    unsafe_code,
    reason = "the update loop runs in functions compiled for AVX2 or AVX-512, called once the CPU is checked"
)]

use std::borrow::Cow;

use rl_core::simd::Isa;
use rl_core::{Location, MemoryPlan};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::pool::Pool;

/// Hyperparameters of [`Adam`], the one optimiser configuration of the workspace.
///
/// The defaults are the ones PPO implementations use (Stable-Baselines3's `PPO`, CleanRL's
/// `ppo.py`), which differ from PyTorch's Adam defaults in `lr` and `eps`:
///
/// | field | default | PyTorch default |
/// | --- | --- | --- |
/// | `lr` | `3e-4` | `1e-3` |
/// | `betas` | `[0.9, 0.999]` | same |
/// | `eps` | `1e-5` | `1e-8` |
/// | `weight_decay` | `None` | same |
///
/// Validated by [`AdamConfig::validate`] (and by [`Adam::new`]): every value finite,
/// `lr > 0`, `0 <= beta < 1`, `eps > 0`, `weight_decay >= 0`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdamConfig {
    /// Learning rate (step size). Default `3e-4`. Change it between steps with
    /// [`Adam::set_lr`] for schedules.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates. Default `[0.9, 0.999]`.
    pub betas: [f64; 2],
    /// Added to the square root of the second moment before dividing. Default `1e-5`.
    pub eps: f64,
    /// L2 penalty added to the gradient before the moments are updated (`g + wd * p`),
    /// as PyTorch's `Adam(weight_decay=...)`. Default `None`.
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

/// Whether a learning rate of exactly zero is accepted (a schedule may end at 0).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ZeroLr {
    Refused,
    Allowed,
}

impl AdamConfig {
    /// Checks every value: finite, `lr > 0`, `0 <= beta < 1`, `eps > 0`,
    /// `weight_decay >= 0`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the field.
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
        format!("is {lr} but must be finite and {bound}: 3e-4 is the usual value"),
    ))
}

/// Everything [`Adam`] needs to continue exactly where it stopped: the step counter, both
/// moments (one value per parameter, in the parameters' order) and the configuration
/// with the learning rate last set. [`Adam::state`] borrows the moments (saving a
/// checkpoint copies nothing); a loaded state owns them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdamState<'a> {
    /// Updates applied so far (bias correction uses it).
    pub t: u64,
    /// First-moment estimates (PyTorch's `exp_avg`).
    pub first: Cow<'a, [f32]>,
    /// Second-moment estimates (PyTorch's `exp_avg_sq`).
    pub second: Cow<'a, [f32]>,
    /// The hyperparameters, including the current learning rate.
    pub config: AdamConfig,
}

impl AdamState<'_> {
    /// The state with its moments copied, independent of the optimiser it came from.
    pub fn into_owned(self) -> AdamState<'static> {
        AdamState {
            t: self.t,
            first: Cow::Owned(self.first.into_owned()),
            second: Cow::Owned(self.second.into_owned()),
            config: self.config,
        }
    }
}

/// Adam (Kingma and Ba, 2015) over one flat parameter vector, with state it owns.
///
/// All memory is allocated by [`Adam::new`] (two floats per parameter,
/// [`Adam::memory_plan`]); [`Adam::update`] allocates nothing. The arithmetic is
/// PyTorch's (and dfdx's CPU kernel's, operation for operation, in `f32`).
///
/// ```
/// use rl_nn::{Adam, AdamConfig};
///
/// # fn main() -> rl_nn::Result<()> {
/// let mut params = vec![1.0f32, -2.0];
/// let mut adam = Adam::new(params.len(), AdamConfig { lr: 0.1, ..AdamConfig::default() })?;
/// for _ in 0..100 {
///     let grads: Vec<f32> = params.iter().map(|p| 2.0 * p).collect(); // d/dp of p^2
///     adam.update(&mut params, &grads)?;
/// }
/// assert!(params.iter().all(|p| p.abs() < 0.1));
/// let state = adam.state(); // step counter, moments and config: checkpoint it
/// assert_eq!(state.t, 100);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Adam {
    config: AdamConfig,
    t: u64,
    first: Vec<f32>,
    second: Vec<f32>,
}

impl Adam {
    /// Zero moments for `num_params` parameters.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration.
    pub fn new(num_params: usize, config: AdamConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            t: 0,
            first: vec![0.0; num_params],
            second: vec![0.0; num_params],
        })
    }

    /// The hyperparameters.
    pub fn config(&self) -> &AdamConfig {
        &self.config
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.config.lr
    }

    /// Sets the learning rate for the next updates (schedules); 0 is allowed.
    ///
    /// # Errors
    /// [`Error::Config`] for a negative or non-finite rate; nothing changes then.
    pub fn set_lr(&mut self, lr: f64) -> Result<()> {
        check_lr(lr, ZeroLr::Allowed)?;
        self.config.lr = lr;
        Ok(())
    }

    /// Updates applied so far.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// Number of parameters.
    pub fn num_params(&self) -> usize {
        self.first.len()
    }

    /// One step: `params -= lr * m_hat / (sqrt(v_hat) + eps)`. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `params` or `grads` is not [`Adam::num_params`] long;
    /// nothing changes then.
    pub fn update(&mut self, params: &mut [f32], grads: &[f32]) -> Result<()> {
        for (what, len) in [("parameters", params.len()), ("gradients", grads.len())] {
            if len != self.first.len() {
                return Err(Error::shape(what, self.first.len(), len));
            }
        }
        self.t += 1;
        Kernel::new(&self.config, self.t).apply(params, grads, &mut self.first, &mut self.second);
        Ok(())
    }

    /// [`Adam::update`] split across the threads of `pool`: one contiguous block of
    /// parameters per thread, so the result is bit-identical to [`Adam::update`]'s
    /// whatever the pool's size. Vectors under [`Adam::SPLIT_MIN`] parameters per thread
    /// run on the calling thread alone. Allocates nothing.
    ///
    /// # Errors
    /// As [`Adam::update`]; nothing changes then.
    pub fn update_on(&mut self, pool: &Pool, params: &mut [f32], grads: &[f32]) -> Result<()> {
        let n = self.first.len();
        let threads = pool.threads().min(n / Self::SPLIT_MIN);
        if threads < 2 {
            return self.update(params, grads);
        }
        for (what, len) in [("parameters", params.len()), ("gradients", grads.len())] {
            if len != n {
                return Err(Error::shape(what, n, len));
            }
        }
        self.t += 1;
        let kernel = Kernel::new(&self.config, self.t);
        // Whole 64-byte lines per block, so that no two threads write one line.
        let block = n.div_ceil(threads).next_multiple_of(16);
        let parts = Parts {
            params: params.as_mut_ptr(),
            grads: grads.as_ptr(),
            first: self.first.as_mut_ptr(),
            second: self.second.as_mut_ptr(),
        };
        pool.run(n.div_ceil(block), &|task| {
            let (start, end) = (task * block, ((task + 1) * block).min(n));
            // SAFETY:
            // - the four vectors hold `n` floats each (checked above) and are borrowed
            //   for this whole call, which returns after every task has finished;
            // - task `task` touches `start..end` only, disjoint from every other task's
            //   block, and `end <= n`.
            let (p, g, m, v) = unsafe { parts.block(start, end) };
            kernel.apply(p, g, m, v);
        });
        Ok(())
    }

    /// Parameters per thread below which [`Adam::update_on`] does not split: a block of
    /// 8 192 takes a few microseconds, about what handing it to a thread costs.
    pub const SPLIT_MIN: usize = 8_192;

    /// The moments, under `name` (two floats per parameter).
    pub fn memory_plan(&self, name: &str) -> MemoryPlan {
        MemoryPlan::new().with(
            format!("{name}/adam moments"),
            Location::Ram,
            (2 * self.first.len() * size_of::<f32>()) as u64,
        )
    }

    /// The state, borrowing the moments ([`AdamState::into_owned`] for a copy).
    pub fn state(&self) -> AdamState<'_> {
        AdamState {
            t: self.t,
            first: Cow::Borrowed(&self.first),
            second: Cow::Borrowed(&self.second),
            config: self.config,
        }
    }

    /// Checks that `state` fits this optimiser (as many moments as parameters, a valid
    /// configuration), without changing anything.
    ///
    /// # Errors
    /// [`Error::StateMismatch`] or [`Error::Config`] naming what differs.
    pub fn check_state(&self, state: &AdamState<'_>) -> Result<()> {
        state.config.check(ZeroLr::Allowed)?;
        for (what, moments) in [
            ("first moment", &state.first),
            ("second moment", &state.second),
        ] {
            if moments.len() != self.first.len() {
                return Err(Error::StateMismatch {
                    what: format!(
                        "{what} holds {} values but the network has {} parameters",
                        moments.len(),
                        self.first.len()
                    ),
                });
            }
        }
        Ok(())
    }

    /// Replaces the state; checks everything first ([`Adam::check_state`]) and changes
    /// nothing on error.
    ///
    /// # Errors
    /// As [`Adam::check_state`].
    pub fn load_state(&mut self, state: &AdamState<'_>) -> Result<()> {
        self.check_state(state)?;
        self.t = state.t;
        self.first.copy_from_slice(&state.first);
        self.second.copy_from_slice(&state.second);
        self.config = state.config;
        Ok(())
    }
}

/// The vectors of one [`Adam::update_on`], shared with the pool's tasks (each touches
/// its own block).
#[derive(Clone, Copy)]
struct Parts {
    params: *mut f32,
    grads: *const f32,
    first: *mut f32,
    second: *mut f32,
}

impl Parts {
    /// The elements `start..end` of the parameters, gradients and moments.
    ///
    /// # Safety
    /// `start <= end <= n` for vectors of `n` floats that outlive the slices, and no
    /// other live slice overlaps `start..end` of `params`, `first` or `second`.
    unsafe fn block<'b>(self, start: usize, end: usize) -> Block<'b> {
        let len = end - start;
        // SAFETY: as the caller guarantees.
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.params.add(start), len),
                std::slice::from_raw_parts(self.grads.add(start), len),
                std::slice::from_raw_parts_mut(self.first.add(start), len),
                std::slice::from_raw_parts_mut(self.second.add(start), len),
            )
        }
    }
}

/// Parameters, gradients, first and second moments of one block.
type Block<'b> = (&'b mut [f32], &'b [f32], &'b mut [f32], &'b mut [f32]);

// SAFETY:
// - `Adam::update_on` gives each task a disjoint block behind the pointers and waits for
//   every task before the borrows they came from end.
unsafe impl Sync for Parts {}

/// The per-step constants of the update, in `f32`.
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
        // Beyond i32::MAX steps, beta^t is 0 in f32 for any beta < 1.
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

    /// One step over every parameter, on the widest instruction set this CPU runs.
    fn apply(&self, params: &mut [f32], grads: &[f32], first: &mut [f32], second: &mut [f32]) {
        self.apply_on(Isa::detect(), params, grads, first, second);
    }

    /// [`Kernel::apply`] on `isa` (which the CPU must support; checked). Every set gives
    /// the same bits: the same operations in the same order, none fused, and the wider
    /// sets only run more elements at once.
    fn apply_on(
        &self,
        isa: Isa,
        params: &mut [f32],
        grads: &[f32],
        first: &mut [f32],
        second: &mut [f32],
    ) {
        assert!(
            isa.is_supported(),
            "{isa:?} kernels on a CPU without {isa:?}"
        );
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU runs AVX-512F (checked above).
            Isa::Avx512 => unsafe { self.apply_avx512(params, grads, first, second) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU runs AVX2 (checked above).
            Isa::Avx2 => unsafe { self.apply_avx2(params, grads, first, second) },
            _ => self.apply_any(params, grads, first, second),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    fn apply_avx512(
        &self,
        params: &mut [f32],
        grads: &[f32],
        first: &mut [f32],
        second: &mut [f32],
    ) {
        self.apply_any(params, grads, first, second);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn apply_avx2(&self, params: &mut [f32], grads: &[f32], first: &mut [f32], second: &mut [f32]) {
        self.apply_any(params, grads, first, second);
    }

    /// The loop, inlined into each instruction set's function and vectorised there.
    /// Operation for operation the arithmetic of dfdx 0.13's CPU Adam kernel (the oracle
    /// test compares bit for bit): keep it that way. One addition: a moment that falls
    /// below `f32::MIN_POSITIVE` (1.2e-38) is stored as 0. The first moment of a
    /// parameter whose gradient has become 0 (the weights of a dead ReLU unit) decays by
    /// `beta1` a step into the subnormal range and stays there: `0.9` times the smallest
    /// subnormal rounds back to it. Arithmetic on subnormals is slow in hardware (the
    /// SAC critics' Adam step took 5x its time on a Zen 4 core); such a moment moves its
    /// parameter by at most `lr * 1.2e-38 / eps` a step, which leaves any parameter above
    /// about 1e-29 in size unchanged in `f32`.
    #[inline(always)]
    fn apply_any(&self, params: &mut [f32], grads: &[f32], first: &mut [f32], second: &mut [f32]) {
        match self.weight_decay {
            None => self.apply_loop::<false>(params, grads, first, second),
            Some(_) => self.apply_loop::<true>(params, grads, first, second),
        }
    }

    #[inline(always)]
    fn apply_loop<const DECAY: bool>(
        &self,
        params: &mut [f32],
        grads: &[f32],
        first: &mut [f32],
        second: &mut [f32],
    ) {
        let wd = self.weight_decay.unwrap_or(0.0);
        let moments = first.iter_mut().zip(second.iter_mut());
        for ((p, &g), (m, v)) in params.iter_mut().zip(grads).zip(moments) {
            let mut g = g;
            if DECAY {
                g += wd * *p;
            }
            *m = flush_subnormal(*m * self.beta1 + g * self.one_minus_beta1);
            *v = flush_subnormal(*v * self.beta2 + g * g * self.one_minus_beta2);
            let m_hat = *m * self.correction1;
            let v_hat = *v * self.correction2;
            *p -= self.lr * m_hat / (v_hat.sqrt() + self.eps);
        }
    }
}

/// `x`, or 0 where `x` is subnormal (`|x| < f32::MIN_POSITIVE`, zero included).
#[inline(always)]
fn flush_subnormal(x: f32) -> f32 {
    if x.abs() < f32::MIN_POSITIVE { 0.0 } else { x }
}

#[cfg(test)]
mod tests;
