//! Element-wise nonlinearities between layers, with their derivatives.

use serde::{Deserialize, Serialize};

/// The nonlinearity after every hidden layer of an [`Mlp`](crate::Mlp) (the output layer
/// is linear). Chosen at run time, saved in the network's
/// [`Architecture`](crate::Architecture).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// `max(x, 0)`: the cheapest, the default.
    #[default]
    Relu,
    /// `tanh(x)`: Stable-Baselines3's default for PPO.
    Tanh,
}

impl Activation {
    /// The name used in architectures, configs and logs: `"relu"` or `"tanh"`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Relu => "relu",
            Self::Tanh => "tanh",
        }
    }

    /// The PyTorch module that computes it (`"ReLU"`, `"Tanh"`), for exported weights.
    pub const fn torch_name(self) -> &'static str {
        match self {
            Self::Relu => "ReLU",
            Self::Tanh => "Tanh",
        }
    }

    /// Applies the nonlinearity in place.
    pub fn apply(self, values: &mut [f32]) {
        match self {
            Self::Relu => values.iter_mut().for_each(|v| *v = v.max(0.0)),
            Self::Tanh => values.iter_mut().for_each(|v| *v = tanh(*v)),
        }
    }

    /// `values[i] = act(values[i] + bias[i])` in place, one sweep (`bias` as long as
    /// `values`: one row of a layer's outputs).
    pub fn apply_with_bias(self, values: &mut [f32], bias: &[f32]) {
        let pairs = values.iter_mut().zip(bias);
        match self {
            Self::Relu => pairs.for_each(|(v, &b)| *v = (*v + b).max(0.0)),
            Self::Tanh => pairs.for_each(|(v, &b)| *v = tanh(*v + b)),
        }
    }

    /// Multiplies `grads` in place by the derivative at the points whose outputs are
    /// `outputs` (both derivatives are functions of the output: `y > 0` for ReLU,
    /// `1 - y^2` for tanh).
    pub fn backward(self, outputs: &[f32], grads: &mut [f32]) {
        match self {
            // A select, not a branch, so that the loop vectorises.
            Self::Relu => grads
                .iter_mut()
                .zip(outputs)
                .for_each(|(g, &y)| *g = if y > 0.0 { *g } else { 0.0 }),
            Self::Tanh => grads
                .iter_mut()
                .zip(outputs)
                .for_each(|(g, &y)| *g *= 1.0 - y * y),
        }
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Activation {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "relu" => Ok(Self::Relu),
            "tanh" => Ok(Self::Tanh),
            other => Err(crate::Error::config(
                "activation",
                format!("is {other:?}: use \"relu\" or \"tanh\""),
            )),
        }
    }
}

/// `tanh(x)` in `f32` as a rational function of `x` (Eigen's `generic_fast_tanh_float`
/// coefficients: odd degree-13 numerator over even degree-6 denominator), clamped where
/// `tanh` rounds to 1: no libm call, so the loops over a layer's outputs vectorise.
/// Within a few ulps of `f32::tanh` (a test bounds it). Plain multiplies and adds, not
/// `mul_add`: without a compile-time FMA target that would be a libm call.
#[inline]
pub(crate) fn tanh(x: f32) -> f32 {
    const CLAMP: f32 = 7.905_311;
    const A1: f32 = 4.893_524_6e-3;
    const A3: f32 = 6.372_619_3e-4;
    const A5: f32 = 1.485_722_4e-5;
    const A7: f32 = 5.122_297e-8;
    const A9: f32 = -8.604_672e-11;
    const A11: f32 = 2.000_188e-13;
    const A13: f32 = -2.760_768_5e-16;
    const B0: f32 = 4.893_525e-3;
    const B2: f32 = 2.268_434_7e-3;
    const B4: f32 = 1.185_347_1e-4;
    const B6: f32 = 1.198_258_4e-6;
    let x = x.clamp(-CLAMP, CLAMP);
    let x2 = x * x;
    let mut p = x2 * A13 + A11;
    p = x2 * p + A9;
    p = x2 * p + A7;
    p = x2 * p + A5;
    p = x2 * p + A3;
    p = x2 * p + A1;
    p *= x;
    let mut q = x2 * B6 + B4;
    q = x2 * q + B2;
    q = x2 * q + B0;
    p / q
}
