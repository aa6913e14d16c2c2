//! Representations of a discrete action stored as a `u32` index.

use rl_core::env::check_len;
use rl_core::{Error, FeatureTable, Location, MemoryPlan, Result};

/// Turns a minibatch of action indices into `width()` floats per action, written into a
/// caller-owned buffer that is reused from one minibatch to the next.
pub trait ActionEncoding {
    /// Floats per encoded action.
    fn width(&self) -> usize;

    /// Writes `indices.len() x width()` floats into `out`, row-major.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `out.len() != indices.len() * width()`, or
    /// [`Error::ActionOutOfRange`] for an index not below the number of actions (nothing
    /// is clamped; `out` may be partly written).
    fn encode(&self, indices: &[u32], out: &mut [f32]) -> Result<()>;

    /// What encoding a minibatch of `batch` actions needs.
    fn memory_plan(&self, batch: usize) -> MemoryPlan;
}

fn check_n(what: &str, n: u32) -> Result<()> {
    if n == 0 {
        Err(Error::config(
            what.to_owned(),
            "has 0 actions: a discrete space needs at least 1",
        ))
    } else {
        Ok(())
    }
}

fn check_index(index: u32, n: u32) -> Result<()> {
    if index < n {
        Ok(())
    } else {
        Err(Error::ActionOutOfRange {
            index: u64::from(index),
            n,
        })
    }
}

fn f32_bytes(count: usize) -> u64 {
    (count as u64).saturating_mul(size_of::<f32>() as u64)
}

/// The index itself, as one float.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Index {
    n: u32,
}

impl Index {
    /// The identity encoding of `n` actions.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `n == 0`.
    pub fn new(n: u32) -> Result<Self> {
        check_n("index encoding", n)?;
        Ok(Self { n })
    }
}

impl ActionEncoding for Index {
    fn width(&self) -> usize {
        1
    }

    fn encode(&self, indices: &[u32], out: &mut [f32]) -> Result<()> {
        check_len("index encoding output", indices.len(), out.len())?;
        for (&i, o) in indices.iter().zip(out.iter_mut()) {
            check_index(i, self.n)?;
            *o = i as f32;
        }
        Ok(())
    }

    fn memory_plan(&self, batch: usize) -> MemoryPlan {
        MemoryPlan::new().with("index/batch", Location::Ram, f32_bytes(batch))
    }
}

/// One-hot vectors of `n` floats, materialised for one minibatch at a time, never stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneHot {
    n: u32,
}

impl OneHot {
    /// One-hot encoding of `n` actions.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `n == 0`.
    pub fn new(n: u32) -> Result<Self> {
        check_n("one-hot encoding", n)?;
        Ok(Self { n })
    }
}

impl ActionEncoding for OneHot {
    fn width(&self) -> usize {
        self.n as usize
    }

    fn encode(&self, indices: &[u32], out: &mut [f32]) -> Result<()> {
        let n = self.n as usize;
        check_len("one-hot output", indices.len() * n, out.len())?;
        for (&i, row) in indices.iter().zip(out.chunks_exact_mut(n)) {
            check_index(i, self.n)?;
            row.fill(0.0);
            row[i as usize] = 1.0;
        }
        Ok(())
    }

    /// `batch x n x 4` bytes, transient (the minibatch buffer).
    fn memory_plan(&self, batch: usize) -> MemoryPlan {
        MemoryPlan::new().with(
            "one_hot/batch",
            Location::Ram,
            f32_bytes(batch.saturating_mul(self.n as usize)),
        )
    }
}

/// Binary codes: `ceil(log2 n)` bits (at least 1), least significant bit first, as
/// `0.0`/`1.0` floats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binary {
    n: u32,
    bits: u32,
}

impl Binary {
    /// Binary encoding of `n` actions.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `n == 0`.
    pub fn new(n: u32) -> Result<Self> {
        check_n("binary encoding", n)?;
        let bits = (u32::BITS - (n - 1).leading_zeros()).max(1);
        Ok(Self { n, bits })
    }

    /// Bits per action.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Reads indices back from codes (a float above `0.5` is a set bit).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `codes.len() != out.len() * bits()`, or
    /// [`Error::ActionOutOfRange`] if a code names an index not below `n`.
    pub fn decode(&self, codes: &[f32], out: &mut [u32]) -> Result<()> {
        let bits = self.bits as usize;
        check_len("binary codes", out.len() * bits, codes.len())?;
        for (code, o) in codes.chunks_exact(bits).zip(out.iter_mut()) {
            let index = code
                .iter()
                .enumerate()
                .filter(|(_, b)| **b > 0.5)
                .fold(0u32, |acc, (bit, _)| acc | (1 << bit));
            check_index(index, self.n)?;
            *o = index;
        }
        Ok(())
    }
}

impl ActionEncoding for Binary {
    fn width(&self) -> usize {
        self.bits as usize
    }

    fn encode(&self, indices: &[u32], out: &mut [f32]) -> Result<()> {
        let bits = self.bits as usize;
        check_len("binary output", indices.len() * bits, out.len())?;
        for (&i, row) in indices.iter().zip(out.chunks_exact_mut(bits)) {
            check_index(i, self.n)?;
            for (bit, o) in row.iter_mut().enumerate() {
                *o = ((i >> bit) & 1) as f32;
            }
        }
        Ok(())
    }

    fn memory_plan(&self, batch: usize) -> MemoryPlan {
        MemoryPlan::new().with(
            "binary/batch",
            Location::Ram,
            f32_bytes(batch.saturating_mul(self.bits as usize)),
        )
    }
}

/// Rows of a shared [`FeatureTable`], gathered for the indices of a minibatch.
///
/// The table is held once per process: cloning an `Embedding` shares it.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    table: FeatureTable,
}

impl Embedding {
    /// Embeds action `i` as row `i` of `table`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the table has more than `u32::MAX` rows.
    pub fn new(table: FeatureTable) -> Result<Self> {
        if u32::try_from(table.rows()).is_err() {
            return Err(Error::config(
                "embedding table",
                format!("has {} rows: at most u32::MAX actions", table.rows()),
            ));
        }
        Ok(Self { table })
    }

    /// The shared table.
    pub fn table(&self) -> &FeatureTable {
        &self.table
    }
}

impl ActionEncoding for Embedding {
    fn width(&self) -> usize {
        self.table.dim()
    }

    fn encode(&self, indices: &[u32], out: &mut [f32]) -> Result<()> {
        let d = self.table.dim();
        check_len("embedding output", indices.len() * d, out.len())?;
        let n = self.table.rows() as u32;
        for (&i, row) in indices.iter().zip(out.chunks_exact_mut(d)) {
            let features = self.table.row(i as usize).ok_or(Error::ActionOutOfRange {
                index: u64::from(i),
                n,
            })?;
            row.copy_from_slice(features);
        }
        Ok(())
    }

    /// The table once plus `batch x d` floats for the gathered rows.
    fn memory_plan(&self, batch: usize) -> MemoryPlan {
        self.table.memory_plan("embedding/table").with(
            "embedding/batch",
            Location::Ram,
            f32_bytes(batch.saturating_mul(self.table.dim())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table(n: usize, d: usize) -> FeatureTable {
        FeatureTable::new(n, d, (0..n * d).map(|x| x as f32 * 0.5 - 3.0).collect()).unwrap()
    }

    proptest! {
        #[test]
        fn encodings_match_naive(n in 1u32..300, d in 1usize..5, raw in proptest::collection::vec(any::<u32>(), 0..20)) {
            let indices: Vec<u32> = raw.iter().map(|r| r % n).collect();
            let b = indices.len();

            let mut out = vec![f32::NAN; b];
            Index::new(n).unwrap().encode(&indices, &mut out).unwrap();
            prop_assert!(out.iter().zip(&indices).all(|(&o, &i)| o == i as f32));

            let mut out = vec![f32::NAN; b * n as usize];
            OneHot::new(n).unwrap().encode(&indices, &mut out).unwrap();
            for (row, &i) in out.chunks(n as usize).zip(&indices) {
                for (j, &v) in row.iter().enumerate() {
                    prop_assert_eq!(v, if j == i as usize { 1.0 } else { 0.0 });
                }
            }

            let bin = Binary::new(n).unwrap();
            prop_assert!(u64::from(n) <= 1u64 << bin.bits());
            prop_assert!(bin.bits() == 1 || u64::from(n) > 1u64 << (bin.bits() - 1));
            let mut codes = vec![f32::NAN; b * bin.bits() as usize];
            bin.encode(&indices, &mut codes).unwrap();
            let mut back = vec![0u32; b];
            bin.decode(&codes, &mut back).unwrap();
            prop_assert_eq!(&back, &indices);

            let t = table(n as usize, d);
            let emb = Embedding::new(t.clone()).unwrap();
            let mut out = vec![f32::NAN; b * d];
            emb.encode(&indices, &mut out).unwrap();
            for (row, &i) in out.chunks(d).zip(&indices) {
                prop_assert_eq!(Some(row), t.row(i as usize));
            }
        }
    }

    #[test]
    fn out_of_range_indices_are_errors_not_clamps() {
        let oor = |r: Result<()>| matches!(r, Err(Error::ActionOutOfRange { index: 5, n: 5 }));
        let t = table(5, 2);
        assert!(oor(Index::new(5).unwrap().encode(&[5], &mut [0.0])));
        assert!(oor(OneHot::new(5).unwrap().encode(&[5], &mut [0.0; 5])));
        assert!(oor(Binary::new(5).unwrap().encode(&[5], &mut [0.0; 3])));
        assert!(oor(Embedding::new(t).unwrap().encode(&[5], &mut [0.0; 2])));
        let mut out = [0u32];
        // 7 = 0b111 is a valid 3-bit code but not an action of 5.
        assert!(matches!(
            Binary::new(5).unwrap().decode(&[1.0, 1.0, 1.0], &mut out),
            Err(Error::ActionOutOfRange { index: 7, n: 5 })
        ));
        assert!(matches!(
            OneHot::new(5).unwrap().encode(&[1], &mut [0.0; 4]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(OneHot::new(0).is_err());
    }

    #[test]
    fn clones_share_the_table() {
        let emb = Embedding::new(table(4, 3)).unwrap();
        let copy = emb.clone();
        assert!(copy.table().shares_storage_with(emb.table()));
    }

    #[test]
    fn one_hot_plan_dwarfs_embedding_plan_at_100k_actions() {
        let n = 100_000;
        let one_hot = OneHot::new(n).unwrap().memory_plan(256);
        assert_eq!(one_hot.total(Location::Ram), 256 * 100_000 * 4); // ~102 MB
        let emb =
            Embedding::new(FeatureTable::new(n as usize, 8, vec![0.0; n as usize * 8]).unwrap())
                .unwrap()
                .memory_plan(256);
        assert_eq!(emb.lines()[0].bytes, 3_200_000);
        assert_eq!(emb.lines()[1].bytes, 8_192);
        assert_eq!(emb.total(Location::Ram), 3_208_192);
        assert_eq!(
            Binary::new(n)
                .unwrap()
                .memory_plan(256)
                .total(Location::Ram),
            256 * 17 * 4
        );
    }
}
