//! Versions of a network's parameter values.

use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies the values of a network's parameters: a number no other network or earlier
/// state of this one had, renewed whenever they may change (every `params_mut`). A
/// workspace keeps what it derived from the parameters (packed weights,
/// `linalg::WeightPack`) for as long as the version it saw is the network's. A clone
/// shares its original's version: their values are equal until one changes, and then it
/// gets a new one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Version(u64);

impl Version {
    /// A version no network had before.
    pub(crate) fn fresh() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Its number.
    pub(crate) fn get(self) -> u64 {
        self.0
    }
}
