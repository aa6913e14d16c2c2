//! What [`CategoricalPolicy`](super::CategoricalPolicy) and
//! [`GaussianPolicy`](super::GaussianPolicy) hold in common: the network with its
//! device, the sampling generator, the configuration and the observation normaliser.

use std::fmt;

use dfdx::prelude::{Axis, Const, Cpu, SumTo, Tape, Tensor, TensorFromVec};
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::mlp::{Activation, Mlp};
use super::{ObsNormalizer, PolicyConfig, check_len};
use crate::error::Result;

/// Offsets the sampling generator's seed from the device's (different generators anyway;
/// the offset keeps the two streams apart should either ever change).
const SAMPLING_SEED_OFFSET: u64 = 0x9E37_79B9_7F4A_7C15;

/// The state of a policy over observations of `OBS` `f32` elements with network `N`.
pub(super) struct PolicyCore<N, const OBS: usize> {
    pub(super) net: N,
    pub(super) dev: Cpu,
    pub(super) rng: Xoshiro256PlusPlus,
    pub(super) config: PolicyConfig,
    /// Normalises inputs when set (see [`ObsNormalizer`]).
    pub(super) obs_norm: Option<ObsNormalizer>,
    /// Per-row outputs of the last `act` (log-probabilities or means), reused between
    /// calls; a clone starts empty.
    pub(super) scratch: Vec<f32>,
}

impl<N: Clone, const OBS: usize> Clone for PolicyCore<N, OBS> {
    fn clone(&self) -> Self {
        Self {
            net: self.net.clone(),
            dev: self.dev.clone(),
            rng: self.rng.clone(),
            config: self.config,
            obs_norm: self.obs_norm.clone(),
            scratch: Vec::new(),
        }
    }
}

impl<N, const OBS: usize> PolicyCore<N, OBS> {
    /// Seeds the device with `seed` before `build` makes the network on it, so that the
    /// seed fixes the initial weights; the sampling generator gets a seed of its own.
    pub(super) fn new(
        config: PolicyConfig,
        seed: u64,
        build: impl FnOnce(&Cpu) -> Result<N>,
    ) -> Result<Self> {
        let dev = Cpu::seed_from_u64(seed);
        let net = build(&dev)?;
        Ok(Self {
            net,
            dev,
            rng: sampling_rng(seed),
            config,
            obs_norm: None,
            scratch: Vec::new(),
        })
    }

    pub(super) fn reseed(&mut self, seed: u64) {
        self.rng = sampling_rng(seed);
    }

    /// Formats the policy as `name`, leaving out the generator and normaliser.
    pub(super) fn debug_as(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result
    where
        N: fmt::Debug,
    {
        f.debug_struct(name)
            .field("net", &self.net)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }

    pub(super) fn set_obs_normalizer(&mut self, normalizer: Option<ObsNormalizer>) -> Result<()> {
        if let Some(n) = &normalizer {
            n.check(OBS)?;
        }
        self.obs_norm = normalizer;
        Ok(())
    }

    /// `obs` (`rows` rows) as the network's input, through the normaliser if there is one.
    pub(super) fn input(
        &self,
        obs: &[f32],
        rows: usize,
    ) -> Result<Tensor<(usize, Const<OBS>), f32, Cpu>> {
        let data = match &self.obs_norm {
            None => obs.to_vec(),
            Some(normalizer) => {
                let mut out = Vec::with_capacity(obs.len());
                normalizer.normalize_into(obs, &mut out);
                out
            }
        };
        Ok(self.dev.try_tensor_from_vec(data, (rows, Const::<OBS>))?)
    }

    /// `ValuePolicy::values` for a policy whose value network is `critic` (a field of
    /// `net`, which this type cannot name).
    pub(super) fn write_values<const HIDDEN: usize, A: Activation>(
        &self,
        critic: &Mlp<OBS, HIDDEN, 1, A, f32, Cpu>,
        obs: &[f32],
        rows: usize,
        values: &mut [f32],
    ) -> Result<()> {
        check_len("observations", rows * OBS, obs.len())?;
        check_len("value output", rows, values.len())?;
        if rows > 0 {
            critic_values(critic, self.input(obs, rows)?).copy_into(values);
        }
        Ok(())
    }
}

/// `V(s)` for each row of `x`.
pub(super) fn critic_values<const OBS: usize, const HIDDEN: usize, A: Activation, T>(
    critic: &Mlp<OBS, HIDDEN, 1, A, f32, Cpu>,
    x: Tensor<(usize, Const<OBS>), f32, Cpu, T>,
) -> Tensor<(usize,), f32, Cpu, T>
where
    T: Tape<f32, Cpu>,
{
    // A sum over the one output column: exact, and keeps the tape.
    critic.forward_rows(x).sum::<(usize,), Axis<1>>()
}

fn sampling_rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed.wrapping_add(SAMPLING_SEED_OFFSET))
}

/// The [`ActorCritic`](super::ActorCritic) methods that only reach into the `core` field
/// (a [`PolicyCore`]): invoke inside the trait impl.
macro_rules! delegate_to_core {
    () => {
        fn net(&self) -> &Self::Net {
            &self.core.net
        }

        fn net_mut(&mut self) -> &mut Self::Net {
            &mut self.core.net
        }

        fn device(&self) -> &::dfdx::prelude::Cpu {
            &self.core.dev
        }

        fn sampling_state(&self) -> ::rand_xoshiro::Xoshiro256PlusPlus {
            self.core.rng.clone()
        }

        fn set_sampling_state(&mut self, state: ::rand_xoshiro::Xoshiro256PlusPlus) {
            self.core.rng = state;
        }

        fn obs_normalizer(&self) -> Option<&$crate::ObsNormalizer> {
            self.core.obs_norm.as_ref()
        }

        fn obs_normalizer_mut(&mut self) -> Option<&mut $crate::ObsNormalizer> {
            self.core.obs_norm.as_mut()
        }

        fn set_obs_normalizer(
            &mut self,
            normalizer: Option<$crate::ObsNormalizer>,
        ) -> $crate::Result<()> {
            self.core.set_obs_normalizer(normalizer)
        }
    };
}

pub(super) use delegate_to_core;
