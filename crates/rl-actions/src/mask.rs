//! Action masks as bitsets.

use rl_core::{Error, Result};

/// Which of `n` actions are available, one bit per action (`1` = available).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionMask {
    n: u32,
    words: Vec<u64>,
}

impl ActionMask {
    /// A mask of `n` actions, all available.
    pub fn all(n: u32) -> Self {
        let mut mask = Self::none(n);
        mask.allow_all();
        mask
    }

    /// Makes every action available again, in place (no allocation): masks reused from
    /// one batch to the next start here.
    pub fn allow_all(&mut self) {
        self.words.fill(u64::MAX);
        let tail = self.n % 64;
        if tail != 0
            && let Some(last) = self.words.last_mut()
        {
            *last = (1u64 << tail) - 1;
        }
    }

    /// Makes every action unavailable, in place (no allocation).
    pub fn forbid_all(&mut self) {
        self.words.fill(0);
    }

    /// A mask of `n` actions, none available (allow some with [`ActionMask::allow`]).
    pub fn none(n: u32) -> Self {
        Self {
            n,
            words: vec![0; (n as usize).div_ceil(64)],
        }
    }

    /// Number of actions the mask covers.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// Whether the mask covers no action at all.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn check(&self, index: u32) -> Result<()> {
        if index < self.n {
            Ok(())
        } else {
            Err(Error::ActionOutOfRange {
                index: u64::from(index),
                n: self.n,
            })
        }
    }

    /// Makes action `index` available.
    ///
    /// # Errors
    /// [`Error::ActionOutOfRange`] if `index >= n`.
    pub fn allow(&mut self, index: u32) -> Result<()> {
        self.check(index)?;
        self.words[index as usize / 64] |= 1u64 << (index % 64);
        Ok(())
    }

    /// Makes action `index` unavailable.
    ///
    /// # Errors
    /// [`Error::ActionOutOfRange`] if `index >= n`.
    pub fn forbid(&mut self, index: u32) -> Result<()> {
        self.check(index)?;
        self.words[index as usize / 64] &= !(1u64 << (index % 64));
        Ok(())
    }

    /// Whether action `index` is available (`false` for an index out of range).
    pub fn is_allowed(&self, index: u32) -> bool {
        index < self.n && self.words[index as usize / 64] & (1u64 << (index % 64)) != 0
    }

    /// Number of available actions.
    pub fn count_allowed(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// The bits, 64 actions per word, action `i` at bit `i % 64` of word `i / 64`.
    pub fn as_words(&self) -> &[u64] {
        &self.words
    }
}

/// The masks applied to one chunked operation.
#[derive(Clone, Copy, Debug, Default)]
pub enum Masks<'a> {
    /// Every action is available in every row.
    #[default]
    None,
    /// One mask for every row.
    Shared(&'a ActionMask),
    /// One mask per row of the batch.
    PerRow(&'a [ActionMask]),
}

impl Masks<'_> {
    /// Whether action `index` is available in row `row`.
    #[inline]
    pub(crate) fn allowed(&self, row: usize, index: u32) -> bool {
        match self {
            Masks::None => true,
            Masks::Shared(m) => m.is_allowed(index),
            Masks::PerRow(ms) => ms.get(row).is_some_and(|m| m.is_allowed(index)),
        }
    }

    /// Checks sizes against `n` actions and `batch` rows, and that every row has at least
    /// `need` available actions.
    pub(crate) fn validate(&self, n: usize, batch: usize, need: usize) -> Result<()> {
        let check = |m: &ActionMask| -> Result<()> {
            if m.len() as usize != n {
                return Err(Error::ShapeMismatch {
                    what: "action mask",
                    expected: n,
                    actual: m.len() as usize,
                });
            }
            let allowed = m.count_allowed() as usize;
            if allowed < need {
                return Err(Error::config(
                    "action mask",
                    format!(
                        "allows {allowed} actions but the operation needs {need}: \
                         every row must have an available action"
                    ),
                ));
            }
            Ok(())
        };
        match self {
            Masks::None => {
                if n < need {
                    return Err(Error::config(
                        "action count",
                        format!("is {n} but the operation needs {need}"),
                    ));
                }
                Ok(())
            }
            Masks::Shared(m) => check(m),
            Masks::PerRow(ms) => {
                rl_core::env::check_len("action masks (one per row)", batch, ms.len())?;
                ms.iter().try_for_each(check)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_reset_in_place_to_all_or_none() {
        for n in [1u32, 63, 64, 65, 130] {
            let mut mask = ActionMask::none(n);
            mask.allow_all();
            assert_eq!(mask, ActionMask::all(n));
            assert_eq!(mask.count_allowed(), n);
            mask.forbid_all();
            assert_eq!(mask, ActionMask::none(n));
            assert!(!mask.is_allowed(0));
        }
    }

    #[test]
    fn bits_round_trip_and_out_of_range_errors() {
        let mut m = ActionMask::all(70);
        assert_eq!(m.count_allowed(), 70);
        m.forbid(65).unwrap();
        assert!(!m.is_allowed(65));
        assert!(m.is_allowed(64));
        assert!(!m.is_allowed(70));
        assert!(matches!(
            m.forbid(70),
            Err(Error::ActionOutOfRange { index: 70, n: 70 })
        ));
        let mut none = ActionMask::none(3);
        assert_eq!(none.count_allowed(), 0);
        none.allow(2).unwrap();
        assert_eq!(none.as_words(), &[4]);
    }

    #[test]
    fn a_row_without_actions_is_an_error() {
        let none = ActionMask::none(5);
        assert!(matches!(
            Masks::Shared(&none).validate(5, 1, 1),
            Err(Error::InvalidConfig { .. })
        ));
        let all = ActionMask::all(4);
        assert!(matches!(
            Masks::Shared(&all).validate(5, 1, 1),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}
