//! Shared, read-only feature tables (one row of features per discrete action).

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::memory::{Location, MemoryPlan};

/// An `rows x dim` table of `f32` features, held once per process.
///
/// Cloning shares the same allocation (an [`Arc`]); it never copies the data. Large
/// discrete action spaces describe their actions with such a table, and every consumer
/// (environment, action representation, network) reads the one copy.
#[derive(Clone, PartialEq)]
pub struct FeatureTable {
    rows: usize,
    dim: usize,
    data: Arc<[f32]>,
}

impl FeatureTable {
    /// A table from row-major data.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `rows` or `dim` is zero, or
    /// [`Error::ShapeMismatch`] if `data.len() != rows * dim`.
    pub fn new(rows: usize, dim: usize, data: Vec<f32>) -> Result<Self> {
        if rows == 0 || dim == 0 {
            return Err(Error::config(
                "feature table",
                format!("has shape {rows} x {dim}: both must be at least 1"),
            ));
        }
        crate::env::check_len("feature table data", rows * dim, data.len())?;
        Ok(Self {
            rows,
            dim,
            data: data.into(),
        })
    }

    /// Number of rows (actions).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Features per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Row `i`, or `None` if out of range.
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        (i < self.rows).then(|| &self.data[i * self.dim..(i + 1) * self.dim])
    }

    /// The whole table, row-major.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The whole table, mutably, for a table that is learned. Copy-on-write: if other
    /// handles share the data, this handle first gets its own copy (one allocation of the
    /// table's size), so they never see the change; later calls reuse that copy.
    pub fn values_mut(&mut self) -> &mut [f32] {
        Arc::make_mut(&mut self.data)
    }

    /// Whether two handles share one allocation.
    pub fn shares_storage_with(&self, other: &FeatureTable) -> bool {
        Arc::ptr_eq(&self.data, &other.data)
    }

    /// The table's bytes as a plan line named `component`.
    pub fn memory_plan(&self, component: &str) -> MemoryPlan {
        MemoryPlan::new().with(
            component,
            Location::Ram,
            (self.data.len() * size_of::<f32>()) as u64,
        )
    }
}

impl fmt::Debug for FeatureTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FeatureTable")
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_mut_copies_on_write_and_leaves_other_handles_alone() {
        let shared = FeatureTable::new(2, 2, vec![0., 1., 2., 3.]).unwrap();
        let mut learned = shared.clone();
        learned.values_mut()[3] = 9.0;
        assert_eq!(shared.as_slice(), &[0., 1., 2., 3.]);
        assert_eq!(learned.row(1).unwrap(), &[2., 9.]);
        assert!(!learned.shares_storage_with(&shared));
        // A handle that owns its data alone is changed in place.
        let before = learned.as_slice().as_ptr();
        learned.values_mut()[0] = -1.0;
        assert_eq!(learned.as_slice().as_ptr(), before);
    }

    #[test]
    fn clones_share_one_allocation() {
        let table = FeatureTable::new(3, 2, vec![0., 1., 2., 3., 4., 5.]).unwrap();
        let copy = table.clone();
        assert!(copy.shares_storage_with(&table));
        assert_eq!(copy.row(1), Some(&[2.0f32, 3.0][..]));
        assert_eq!(copy.row(3), None);
        assert_eq!(table.memory_plan("t").total(Location::Ram), 24);
    }

    #[test]
    fn wrong_sizes_are_refused() {
        assert!(FeatureTable::new(2, 2, vec![0.0; 3]).is_err());
        assert!(FeatureTable::new(0, 2, vec![]).is_err());
    }
}
