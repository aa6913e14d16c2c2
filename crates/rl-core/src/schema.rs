//! Column schemas: the row layout of every storage.
//!
//! Storage is columnar: one contiguous column per field, each holding plain-old-data
//! elements of one [`DType`]. A [`Schema`] lists the columns; a row costs exactly
//! [`Schema::row_bytes`], so a storage's size is known from its capacity alone.

use std::fmt;

use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::error::{Error, Result};

/// Element type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit unsigned integer (discrete action indices).
    U32,
    /// 64-bit signed integer (step counters, episode ids).
    I64,
    /// Byte (pixels).
    U8,
    /// One-byte boolean, 0 or 1 (see [`Flag`]).
    Bool,
}

impl DType {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::I64 => 8,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// Lowercase name, as in `f32`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a write into a buffer, or a collector reading an environment, does with NaN or
/// infinite `f32` values (observations, rewards, stored columns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NonFinite {
    /// Refuse with a typed error naming the column (or environment) and row, before
    /// anything is stored (the default: a NaN reward that reaches a loss silently ruins
    /// a run).
    #[default]
    Reject,
    /// Pass them through as they are.
    Allow,
}

/// A one-byte boolean that is plain old data (Rust's `bool` is not: only 0 and 1 are valid
/// bit patterns). Any non-zero byte reads as true.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
#[repr(transparent)]
pub struct Flag(pub u8);

impl Flag {
    /// The flag for `value`.
    pub const fn new(value: bool) -> Self {
        Flag(value as u8)
    }

    /// Whether the flag is set.
    pub const fn get(self) -> bool {
        self.0 != 0
    }
}

impl From<bool> for Flag {
    fn from(value: bool) -> Self {
        Flag::new(value)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can be a column element: plain old data with a [`DType`].
///
/// Sealed: the set of dtypes is part of the storage file format.
pub trait Element: Pod + Default + PartialEq + fmt::Debug + Send + Sync + sealed::Sealed {
    /// The dtype of this element type.
    const DTYPE: DType;

    /// The value as `f64`, exactly for every type but `i64` beyond 2^53; used by bound checks.
    fn to_f64(self) -> f64;
}

macro_rules! element {
    ($ty:ty, $dtype:expr, |$v:ident| $to_f64:expr) => {
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DTYPE: DType = $dtype;
            fn to_f64(self) -> f64 {
                let $v = self;
                $to_f64
            }
        }
    };
}

element!(f32, DType::F32, |v| f64::from(v));
element!(u32, DType::U32, |v| f64::from(v));
element!(i64, DType::I64, |v| v as f64);
element!(u8, DType::U8, |v| f64::from(v));
element!(Flag, DType::Bool, |v| f64::from(v.0.min(1)));

/// One named column: dtype and per-row shape (empty shape = one scalar per row).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Column {
    name: String,
    dtype: DType,
    shape: SmallVec<[usize; 4]>,
}

impl Column {
    /// A column of `shape`-shaped elements per row.
    pub fn new(name: impl Into<String>, dtype: DType, shape: &[usize]) -> Self {
        Self {
            name: name.into(),
            dtype,
            shape: SmallVec::from_slice(shape),
        }
    }

    /// A column of one element per row.
    pub fn scalar(name: impl Into<String>, dtype: DType) -> Self {
        Self::new(name, dtype, &[])
    }

    /// The column's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The per-row shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Elements per row (1 for a scalar column).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.numel() * self.dtype.size()
    }
}

/// The columns of a storage, validated: unique non-empty names, no zero-sized dimension,
/// row size that fits in memory arithmetic.
///
/// ```
/// use rl_core::{Column, DType, Field, Schema};
///
/// let schema = Schema::new([
///     Column::new(Field::Obs.name(), DType::F32, &[4]),
///     Column::scalar(Field::Action.name(), DType::U32),
///     Column::scalar(Field::Reward.name(), DType::F32),
///     Column::scalar(Field::Terminated.name(), DType::Bool),
///     Column::scalar(Field::Truncated.name(), DType::Bool),
/// ])?;
/// assert_eq!(schema.row_bytes(), 16 + 4 + 4 + 1 + 1);
/// assert_eq!(schema.index_of(Field::Reward.name()), Some(2));
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Schema {
    columns: Vec<Column>,
}

impl Schema {
    /// Validates and builds a schema.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for no columns, an empty or duplicated name, a zero-sized
    /// dimension, or a row size that overflows.
    pub fn new(columns: impl IntoIterator<Item = Column>) -> Result<Self> {
        let columns: Vec<Column> = columns.into_iter().collect();
        if columns.is_empty() {
            return Err(Error::config("schema", "has no columns: add at least one"));
        }
        let mut row_bytes = 0usize;
        for (i, column) in columns.iter().enumerate() {
            if column.name.is_empty() {
                return Err(Error::config(
                    format!("column {i}"),
                    "has an empty name: give every column a name",
                ));
            }
            if columns[..i].iter().any(|c| c.name == column.name) {
                return Err(Error::config(
                    format!("column `{}`", column.name),
                    "appears twice: column names must be unique",
                ));
            }
            if column.shape.contains(&0) {
                return Err(Error::config(
                    format!("column `{}`", column.name),
                    format!(
                        "has a zero-sized dimension in shape {:?}: every dimension must be at least 1",
                        column.shape
                    ),
                ));
            }
            let bytes = column
                .shape
                .iter()
                .try_fold(column.dtype.size(), |acc, &d| acc.checked_mul(d))
                .and_then(|b| row_bytes.checked_add(b));
            row_bytes = bytes.ok_or_else(|| {
                Error::config(
                    format!("column `{}`", column.name),
                    "makes a row larger than memory can address: shrink its shape",
                )
            })?;
        }
        Ok(Self { columns })
    }

    /// The columns, in order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Bytes of one row across all columns.
    pub fn row_bytes(&self) -> usize {
        self.columns.iter().map(Column::row_bytes).sum()
    }

    /// Position of the column called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_bad_schemas_with_a_reason() {
        let empty = Schema::new([]).unwrap_err().to_string();
        assert!(empty.contains("no columns"), "{empty}");
        let dup = Schema::new([
            Column::scalar("a", DType::F32),
            Column::scalar("a", DType::U8),
        ])
        .unwrap_err()
        .to_string();
        assert!(dup.contains("appears twice"), "{dup}");
        let zero = Schema::new([Column::new("obs", DType::U8, &[84, 0])])
            .unwrap_err()
            .to_string();
        assert!(zero.contains("zero-sized"), "{zero}");
        let unnamed = Schema::new([Column::scalar("", DType::F32)])
            .unwrap_err()
            .to_string();
        assert!(unnamed.contains("empty name"), "{unnamed}");
        let huge = Schema::new([Column::new("x", DType::I64, &[usize::MAX / 4, 4])]);
        assert!(huge.is_err());
    }

    #[test]
    fn flag_round_trips_and_is_one_byte() {
        assert_eq!(std::mem::size_of::<Flag>(), 1);
        assert!(Flag::from(true).get());
        assert!(!Flag::from(false).get());
        assert!(Flag(7).get());
        assert_eq!(<Flag as Element>::DTYPE.size(), 1);
    }

    #[test]
    fn schema_round_trips_through_serde() {
        let schema = Schema::new([
            Column::new("obs", DType::U8, &[4, 84, 84]),
            Column::scalar("terminated", DType::Bool),
        ])
        .unwrap();
        let json = serde_json::to_string(&schema).unwrap();
        let back: Schema = serde_json::from_str(&json).unwrap();
        assert_eq!(back, schema);
        assert_eq!(back.row_bytes(), 4 * 84 * 84 + 1);
    }

    proptest! {
        #[test]
        fn row_bytes_is_the_sum_of_element_sizes(
            shapes in proptest::collection::vec((0usize..5, proptest::collection::vec(1usize..6, 0..4)), 1..8)
        ) {
            let dtypes = [DType::F32, DType::U32, DType::I64, DType::U8, DType::Bool];
            let columns: Vec<Column> = shapes
                .iter()
                .enumerate()
                .map(|(i, (d, shape))| Column::new(format!("c{i}"), dtypes[*d], shape))
                .collect();
            let expected: usize = shapes
                .iter()
                .map(|(d, shape)| dtypes[*d].size() * shape.iter().product::<usize>())
                .sum();
            let schema = Schema::new(columns).unwrap();
            prop_assert_eq!(schema.row_bytes(), expected);
            for (i, column) in schema.columns().iter().enumerate() {
                prop_assert_eq!(schema.index_of(column.name()), Some(i));
            }
        }
    }
}
