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

/// `tanh(x)` in `f32`: `1 - 2 / (exp(2x) + 1)`, exact to a few ulps, saturating cleanly
/// for large `|x|` and vectorisable (no libm call per element).
#[inline]
fn tanh(x: f32) -> f32 {
    // Beyond 9, tanh is 1 in f32; clamping also keeps exp finite.
    let x = x.clamp(-9.0, 9.0);
    let e = (2.0 * x).exp();
    1.0 - 2.0 / (e + 1.0)
}
