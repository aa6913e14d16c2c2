//! Bootstrapped DQN's parts (Osband et al. 2016): the rows' bootstrap masks, the torso's
//! gradient normalisation and the head an episode acts with ([`ActiveHead`]).
//!
//! The heads are one network: its output layer has `heads x n_actions` outputs, head
//! `h` owning outputs `h n .. (h + 1) n` and so its own rows of the output layer's
//! weights and biases; every layer below is the shared torso. The target network has
//! the same shape, so each head bootstraps from its own target head.
//!
//! Masks: [`rl_storage::bootstrap::BootstrapMasks`]'s bit layout (bit `h` set with
//! probability `mask_probability`), one `i64` per row. The collectors write exactly the
//! six transition columns of a replay schema (`obs`, `action`, `reward`, `terminated`,
//! `truncated`, `next_obs`) and refuse any other, so a mask column cannot be filled when
//! a row is written; instead each row's mask is drawn when it is sampled, from a stream
//! seeded by the learner's seed and the row's storage position. The same row always has
//! the same mask (what a stored column would give), nothing is stored, and a slot of a
//! ring buffer passes its mask to the row that overwrites it (a mask independent of the
//! row's content either way). A recurrent learner passes the storage positions of its
//! windows' rows, so a row keeps its mask in every window it is replayed in; rows
//! without positions are keyed by the update count and the batch row instead (fresh
//! masks every update).

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_nn::{Init, Module, Network, NetworkSpec, NetworkWorkspace, Observation, Weights};
use rl_storage::bootstrap::BootstrapMasks;

use super::EnsembleConfig;
use crate::error::Result;

/// Separates the mask streams from the learner's other draws.
const MASK_SEED: u64 = 0xB007_57A9_0000_0001;
/// Seeds the prior network apart from the online network's initialisation.
const PRIOR_SEED: u64 = 0xB007_57A9_0000_0002;

/// A randomized prior function (Osband et al. 2018): a fixed network of the Q network's
/// shape, initialised from the learner's seed and never trained, whose outputs times
/// `scale` are added to every Q-value of the online and the target network.
#[derive(Clone, Debug)]
pub(super) struct Prior {
    pub(super) net: Network,
    pub(super) scale: f32,
    /// Passes over a batch's observations and next observations, and acting's.
    pub(super) ws_obs: NetworkWorkspace,
    pub(super) ws_next: NetworkWorkspace,
    pub(super) ws_act: NetworkWorkspace,
}

impl Prior {
    /// The prior of a learner seeded `seed` with Q networks of `spec`, for update
    /// batches of `rows` and acting passes of `act_rows`.
    pub(super) fn new(
        spec: NetworkSpec,
        scale: f32,
        seed: u64,
        rows: usize,
        act_rows: usize,
    ) -> Result<Self> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ PRIOR_SEED);
        let net = Network::new(spec, Init::Uniform, &mut rng)?;
        Ok(Self {
            ws_obs: net.workspace(rows),
            ws_next: net.workspace(rows),
            ws_act: net.workspace(act_rows),
            net,
            scale,
        })
    }

    /// The prior's outputs for `rows` observation rows, in `ws`.
    pub(super) fn forward<'w, O: Observation>(
        net: &Network,
        obs: &[O],
        rows: usize,
        ws: &'w mut NetworkWorkspace,
    ) -> Result<&'w [f32]> {
        Ok(net.forward_obs(obs, rows, ws)?)
    }
}

/// `row[i] + scale prior[i]`, or `row[i]` without a prior.
#[inline]
pub(super) fn with_prior(row: &[f32], prior: Option<(&[f32], f32)>, i: usize) -> f32 {
    match prior {
        Some((p, scale)) => row[i] + scale * p[i],
        None => row[i],
    }
}

/// The index of the largest `row[i] + scale prior[i]`; ties go to the lowest index.
pub(super) fn argmax_with(row: &[f32], prior: Option<(&[f32], f32)>) -> usize {
    let mut best = (0, with_prior(row, prior, 0));
    for i in 1..row.len() {
        let v = with_prior(row, prior, i);
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// SplitMix64's finaliser: a well-mixed seed from a key.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The mask of the row at storage position `position` for a learner seeded `seed`.
///
/// # Errors
/// Invalid ensemble settings (refused earlier by [`super::DqnConfig::validate`]).
pub(crate) fn mask_at(ensemble: EnsembleConfig, seed: u64, position: u64) -> Result<i64> {
    let mut mask = [0i64];
    BootstrapMasks::new(
        ensemble.heads,
        ensemble.mask_probability,
        mix(seed ^ MASK_SEED) ^ mix(position),
    )?
    .fill(&mut mask);
    Ok(mask[0])
}

/// Writes the masks of the sampled rows: by storage position, or by `(updates, row)`
/// where there are no positions. Allocates nothing.
pub(crate) fn draw_masks(
    ensemble: EnsembleConfig,
    seed: u64,
    updates: u64,
    positions: Option<&[usize]>,
    masks: &mut [i64],
) -> Result<()> {
    for (b, mask) in masks.iter_mut().enumerate() {
        let key = match positions {
            Some(positions) => positions[b] as u64,
            None => mix(updates ^ MASK_SEED).wrapping_add(b as u64),
        };
        *mask = mask_at(ensemble, seed, key)?;
    }
    Ok(())
}

/// The output layer's weight and bias ranges in `net`'s parameters (the heads').
pub(super) fn output_layer(net: &Network) -> [std::ops::Range<usize>; 2] {
    match net {
        Network::Mlp(m) => {
            let last = m.layers()[m.layers().len() - 1];
            [last.weight(), last.bias()]
        }
        Network::Cnn(c) => match c.linears().last() {
            Some(l) => [l.weight(), l.bias()],
            None => [0..0, 0..0],
        },
    }
}

/// Multiplies the torso's gradients (all but the output layer's) by `scale`.
pub(super) fn scale_torso(net: &Network, grads: &mut [f32], scale: f32) {
    let [weight, bias] = output_layer(net);
    debug_assert_eq!(grads.len(), net.num_params());
    for (i, g) in grads.iter_mut().enumerate() {
        if !weight.contains(&i) && !bias.contains(&i) {
            *g *= scale;
        }
    }
}

/// The head an environment's episode acts with: the per-environment state of
/// [`Dqn`](super::Dqn) and [`DqnActor`](super::DqnActor) as collector policies.
/// Collectors reset it to its default (no head) when an episode starts; the first
/// action of the episode draws a head uniformly, which then acts until the episode ends
/// (Osband et al.'s deep exploration). Plain DQN (one head) never draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActiveHead(Option<u8>);

impl ActiveHead {
    /// The head acting in this episode, if one was drawn.
    pub fn head(self) -> Option<usize> {
        self.0.map(usize::from)
    }

    /// The head, drawn uniformly from `heads` if the episode has none yet.
    pub(super) fn get_or_draw(&mut self, heads: usize, rng: &mut Xoshiro256PlusPlus) -> usize {
        if heads <= 1 {
            return 0;
        }
        match self.0 {
            Some(h) => usize::from(h),
            None => {
                let h = rng.random_range(0..heads);
                self.0 = Some(h as u8);
                h
            }
        }
    }
}
