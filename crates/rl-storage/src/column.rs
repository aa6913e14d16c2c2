//! Typed column slices: how callers hand rows to a buffer and read columns back.

use bytemuck::Pod;
use rl_core::{Column, DType, Element, Flag, Schema};

use crate::error::{Error, Result};

/// A borrowed slice of one column's data for one or more rows, with its dtype.
///
/// Writes take one `ColumnSlice` per schema column, in schema order:
///
/// ```
/// use rl_storage::ColumnSlice;
///
/// let obs = [0.0f32; 8]; // two rows of 4
/// let actions = [1u32, 0];
/// let columns = [ColumnSlice::from(&obs[..]), ColumnSlice::from(&actions[..])];
/// assert_eq!(columns[0].len(), 8);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ColumnSlice<'a> {
    /// `f32` elements.
    F32(&'a [f32]),
    /// `u32` elements (discrete action indices).
    U32(&'a [u32]),
    /// `i64` elements.
    I64(&'a [i64]),
    /// Bytes (pixels).
    U8(&'a [u8]),
    /// One-byte booleans.
    Bool(&'a [Flag]),
}

impl ColumnSlice<'_> {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            ColumnSlice::F32(_) => DType::F32,
            ColumnSlice::U32(_) => DType::U32,
            ColumnSlice::I64(_) => DType::I64,
            ColumnSlice::U8(_) => DType::U8,
            ColumnSlice::Bool(_) => DType::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            ColumnSlice::F32(s) => s.len(),
            ColumnSlice::U32(s) => s.len(),
            ColumnSlice::I64(s) => s.len(),
            ColumnSlice::U8(s) => s.len(),
            ColumnSlice::Bool(s) => s.len(),
        }
    }

    /// Whether the slice holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Views `bytes` (a storage column's, or any aligned buffer) as elements of
    /// `column`'s dtype: the inverse of [`ColumnSlice::as_bytes`].
    ///
    /// # Errors
    /// [`Error::Corrupt`] for bytes that are not a whole number of elements or not
    /// aligned for the dtype.
    pub fn from_bytes<'a>(column: &Column, bytes: &'a [u8]) -> Result<ColumnSlice<'a>> {
        Ok(match column.dtype() {
            DType::F32 => ColumnSlice::F32(cast(bytes, column)?),
            DType::U32 => ColumnSlice::U32(cast(bytes, column)?),
            DType::I64 => ColumnSlice::I64(cast(bytes, column)?),
            DType::U8 => ColumnSlice::U8(bytes),
            DType::Bool => ColumnSlice::Bool(cast(bytes, column)?),
        })
    }

    /// The elements as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ColumnSlice::F32(s) => bytemuck::cast_slice(s),
            ColumnSlice::U32(s) => bytemuck::cast_slice(s),
            ColumnSlice::I64(s) => bytemuck::cast_slice(s),
            ColumnSlice::U8(s) => s,
            ColumnSlice::Bool(s) => bytemuck::cast_slice(s),
        }
    }
}

macro_rules! column_slice_from {
    ($ty:ty, $variant:ident) => {
        impl<'a> From<&'a [$ty]> for ColumnSlice<'a> {
            fn from(slice: &'a [$ty]) -> Self {
                ColumnSlice::$variant(slice)
            }
        }
        impl<'a> From<&'a Vec<$ty>> for ColumnSlice<'a> {
            fn from(slice: &'a Vec<$ty>) -> Self {
                ColumnSlice::$variant(slice)
            }
        }
        impl<'a, const N: usize> From<&'a [$ty; N]> for ColumnSlice<'a> {
            fn from(slice: &'a [$ty; N]) -> Self {
                ColumnSlice::$variant(slice)
            }
        }
    };
}

column_slice_from!(f32, F32);
column_slice_from!(u32, U32);
column_slice_from!(i64, I64);
column_slice_from!(u8, U8);
column_slice_from!(Flag, Bool);

/// Index of the column called `name`, or an error listing the schema's columns.
pub(crate) fn column_index(schema: &Schema, name: &str) -> Result<usize> {
    schema.index_of(name).ok_or_else(|| Error::UnknownColumn {
        name: name.to_owned(),
        available: schema
            .columns()
            .iter()
            .map(Column::name)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Views `bytes` of column `column` as elements of `T`, checking the dtype.
pub(crate) fn typed<'a, T: Element>(column: &Column, bytes: &'a [u8]) -> Result<&'a [T]> {
    if T::DTYPE != column.dtype() {
        return Err(Error::DTypeMismatch {
            column: column.name().to_owned(),
            expected: column.dtype(),
            actual: T::DTYPE,
        });
    }
    cast(bytes, column)
}

/// `bytemuck::try_cast_slice` with the failure (misalignment, never expected) as an error.
fn cast<'a, T: Pod>(bytes: &'a [u8], column: &Column) -> Result<&'a [T]> {
    bytemuck::try_cast_slice(bytes).map_err(|e| Error::Corrupt {
        path: Default::default(),
        reason: format!(
            "column `{}` cannot be viewed as {}: {e}",
            column.name(),
            column.dtype()
        ),
    })
}

/// Refuses an `f32` slice holding NaN or an infinity, naming the column and the row.
pub(crate) fn reject_non_finite(
    slice: ColumnSlice<'_>,
    column: &str,
    per_row: usize,
) -> Result<()> {
    if let ColumnSlice::F32(values) = slice
        && any_non_finite(values)
    {
        let at = values.iter().position(|v| !v.is_finite()).unwrap_or(0);
        return Err(Error::NonFinite {
            column: column.to_owned(),
            row: at / per_row.max(1),
            value: values[at],
        });
    }
    Ok(())
}

/// Whether any `f32` in `values` is NaN or infinite (all exponent bits set). Branch-free
/// so that it vectorises with the baseline SSE2 instructions: this runs on every write.
#[inline]
pub(crate) fn any_non_finite(values: &[f32]) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    values.iter().fold(false, |found, v| {
        found | (v.to_bits() & EXPONENT == EXPONENT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_detection_finds_nan_and_infinities_only() {
        assert!(!any_non_finite(&[
            0.0,
            -1.0,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-45
        ]));
        assert!(any_non_finite(&[0.0, f32::NAN]));
        assert!(any_non_finite(&[f32::INFINITY]));
        assert!(any_non_finite(&[f32::NEG_INFINITY, 1.0]));
        assert!(!any_non_finite(&[]));
    }

    #[test]
    fn slices_know_their_dtype_and_bytes() {
        let flags = [Flag::new(true), Flag::new(false)];
        let slice = ColumnSlice::from(&flags);
        assert_eq!(slice.dtype(), DType::Bool);
        assert_eq!(slice.as_bytes(), &[1, 0]);
        assert_eq!(ColumnSlice::from(&[1.0f32, 2.0][..]).as_bytes().len(), 8);
    }
}
