//! Bootstrap masks: an ensemble of `k` heads shares one copy of the data.
//!
//! Bootstrapped ensembles (bootstrapped DQN, Pearl's `BootstrapReplayBuffer`) train each
//! head on its own resample of the data. Keeping `k` copies multiplies the buffer by `k`;
//! here each row carries a `k`-bit mask (an `i64` column, `k <= 64`) drawn once when the
//! row is written, and head `h` weights a sampled row by bit `h`. Memory cost: 8 bytes a
//! row, whatever `k` is.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Column, DType};

use crate::error::{Error, Result};

/// Name of the mask column by convention.
pub const BOOTSTRAP_MASK: &str = "bootstrap_mask";

/// Draws per-row masks: bit `h` is set with probability `p`, independently per head.
///
/// ```
/// use rl_storage::bootstrap::BootstrapMasks;
///
/// let mut masks = BootstrapMasks::new(10, 0.5, 7)?;
/// let mut column = [0i64; 4];
/// masks.fill(&mut column);
/// let mut weights = [0.0f32; 4];
/// BootstrapMasks::head_weights(&column, 3, &mut weights)?;
/// assert!(weights.iter().all(|&w| w == 0.0 || w == 1.0));
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct BootstrapMasks {
    heads: u32,
    probability: f64,
    rng: Xoshiro256PlusPlus,
}

impl BootstrapMasks {
    /// Masks for `heads` heads (1 to 64), each bit set with `probability` (in `(0, 1]`).
    ///
    /// # Errors
    /// Invalid configuration for heads outside `1..=64` or a probability outside `(0, 1]`.
    pub fn new(heads: u32, probability: f64, seed: u64) -> Result<Self> {
        if !(1..=64).contains(&heads) {
            return Err(Error::config(
                "bootstrap heads",
                format!("is {heads}: use 1 to 64 (one bit per head in an i64 mask)"),
            ));
        }
        if !(probability > 0.0 && probability <= 1.0) {
            return Err(Error::config(
                "bootstrap probability",
                format!("is {probability}: use a value in (0, 1]"),
            ));
        }
        Ok(Self {
            heads,
            probability,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        })
    }

    /// The mask column for a schema: one `i64` per row.
    pub fn column() -> Column {
        Column::scalar(BOOTSTRAP_MASK, DType::I64)
    }

    /// Number of heads.
    pub fn heads(&self) -> u32 {
        self.heads
    }

    /// Draws one mask per element of `masks`. Allocates nothing.
    pub fn fill(&mut self, masks: &mut [i64]) {
        for mask in masks {
            let mut bits = 0u64;
            for head in 0..self.heads {
                if self.rng.random_bool(self.probability) {
                    bits |= 1 << head;
                }
            }
            *mask = bits as i64;
        }
    }

    /// Writes head `head`'s weight for each sampled row: 1.0 where its bit is set, else 0.
    ///
    /// # Errors
    /// Shape mismatch if the slices differ in length; invalid configuration for a head
    /// of 64 or more.
    pub fn head_weights(masks: &[i64], head: u32, weights: &mut [f32]) -> Result<()> {
        rl_core::env::check_len("bootstrap weights", masks.len(), weights.len())?;
        if head >= 64 {
            return Err(Error::config(
                format!("head {head}"),
                "is past the 64 bits of a mask",
            ));
        }
        for (weight, &mask) in weights.iter_mut().zip(masks) {
            *weight = ((mask as u64 >> head) & 1) as f32;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_head_sees_its_share_of_rows() {
        let mut masks = BootstrapMasks::new(64, 0.3, 1).unwrap();
        let mut column = vec![0i64; 20_000];
        masks.fill(&mut column);
        let mut weights = vec![0.0f32; column.len()];
        for head in [0, 17, 63] {
            BootstrapMasks::head_weights(&column, head, &mut weights).unwrap();
            let share = weights.iter().sum::<f32>() / weights.len() as f32;
            // Binomial standard deviation: sqrt(0.3 * 0.7 / 20000) = 0.0032; allow 5 sigma.
            assert!((share - 0.3).abs() < 0.017, "head {head}: {share}");
        }
        let heads_3 = BootstrapMasks::new(3, 1.0, 0).map(|mut m| {
            let mut c = [0i64; 5];
            m.fill(&mut c);
            c
        });
        assert_eq!(
            heads_3.unwrap(),
            [0b111; 5],
            "only the first three bits are used"
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(BootstrapMasks::new(0, 0.5, 0).is_err());
        assert!(BootstrapMasks::new(65, 0.5, 0).is_err());
        assert!(BootstrapMasks::new(4, 0.0, 0).is_err());
        assert!(BootstrapMasks::new(4, f64::NAN, 0).is_err());
        assert!(BootstrapMasks::head_weights(&[0], 64, &mut [0.0]).is_err());
        assert!(BootstrapMasks::head_weights(&[0, 1], 0, &mut [0.0]).is_err());
    }
}
