//! numpy arrays in and out without copies: input columns read straight from the caller's
//! arrays, and numpy arrays over memory this crate owns (batches, environment buffers).
//!
//! This is the crate's `unsafe` code: every other module works on the slices and arrays
//! made here.

use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::npyffi::_PyArray_GET_ITEM_DATA;
use numpy::{PyArray, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rl_core::{Column, DType, Flag, Schema};
use rl_storage::ColumnSlice;

use crate::error::value_error;
use crate::schema::{descr, numpy_name};

/// A numpy array checked against a column: C-contiguous and aligned (a copy was made if
/// the caller's was not), of the column's dtype and per-row shape.
#[derive(Debug)]
pub(crate) struct InputArray<'py> {
    array: Bound<'py, PyUntypedArray>,
    dtype: DType,
    /// Elements in the array.
    len: usize,
}

impl<'py> InputArray<'py> {
    /// Checks `value` against `column` (dtype, and shape `(rows, *column.shape)` with any
    /// `rows`, or exactly `column.shape` when `single` is true) and returns it with its
    /// number of rows. Makes a contiguous copy only for a non-contiguous or misaligned
    /// array.
    pub(crate) fn new(
        column: &Column,
        value: &Bound<'py, PyAny>,
        single: bool,
    ) -> PyResult<(Self, usize)> {
        let name = column.name();
        let py = value.py();
        let array = value.cast::<PyUntypedArray>().map_err(|_| {
            value_error(format!(
                "column `{name}` is a {}, not a numpy array: convert it with np.asarray(x, dtype=np.{})",
                value
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string()),
                numpy_name(column.dtype())
            ))
        })?;
        let given = array.dtype();
        if !given.is_equiv_to(&descr(py, column.dtype())) {
            return Err(value_error(format!(
                "column `{name}` holds {} but the array is {given}: convert it with .astype(np.{}); nothing was written",
                numpy_name(column.dtype()),
                numpy_name(column.dtype())
            )));
        }
        let shape = array.shape();
        let (rows, per_row) = if single {
            (1, shape)
        } else {
            match shape.split_first() {
                Some((&rows, rest)) => (rows, rest),
                None => (0, shape),
            }
        };
        if per_row != column.shape() || (!single && shape.is_empty()) {
            let expected = if single {
                format!("{:?}", column.shape())
            } else {
                format!("(n, {})", dims(column.shape()))
            };
            return Err(value_error(format!(
                "column `{name}` expects an array of shape {expected}, got {shape:?}; nothing was written"
            )));
        }
        let array = if array.is_c_contiguous() && array.is_aligned() {
            array.clone()
        } else {
            py.import("numpy")?
                .call_method1("ascontiguousarray", (array,))?
                .cast_into::<PyUntypedArray>()
                .map_err(PyErr::from)?
        };
        let len = array.len();
        Ok((
            Self {
                array,
                dtype: column.dtype(),
                len,
            },
            rows,
        ))
    }

    /// The elements, borrowed from the array.
    pub(crate) fn slice(&self) -> ColumnSlice<'_> {
        let data = data_ptr(&self.array);
        // SAFETY:
        // - `data` points to `self.len` elements of the column's dtype: `new` checked the
        //   dtype (numpy's equivalence: same kind, size and native byte order), and the
        //   array is C-contiguous and aligned (a copy was made otherwise), so its elements
        //   are `len` consecutive, aligned values of the Rust type matched below.
        // - Every bit pattern is a valid `f32`, `u32`, `i64`, `u8` and `Flag` (a `u8`).
        // - The array is kept alive by `self.array` for the borrow's lifetime; numpy does
        //   not move or free the data of an array that has live references. Another Python
        //   thread writing into the array meanwhile races with this read, as it would
        //   with any numpy function that releases the GIL.
        // - An empty array may have a dangling data pointer: it is never dereferenced
        //   (length 0 uses an empty slice instead).
        unsafe {
            if self.len == 0 {
                return empty_slice(self.dtype);
            }
            match self.dtype {
                DType::F32 => ColumnSlice::F32(std::slice::from_raw_parts(data.cast(), self.len)),
                DType::U32 => ColumnSlice::U32(std::slice::from_raw_parts(data.cast(), self.len)),
                DType::I64 => ColumnSlice::I64(std::slice::from_raw_parts(data.cast(), self.len)),
                DType::U8 => ColumnSlice::U8(std::slice::from_raw_parts(data.cast(), self.len)),
                DType::Bool => {
                    ColumnSlice::Bool(std::slice::from_raw_parts(data.cast::<Flag>(), self.len))
                }
            }
        }
    }
}

/// An empty slice of `dtype`.
fn empty_slice(dtype: DType) -> ColumnSlice<'static> {
    match dtype {
        DType::F32 => ColumnSlice::F32(&[]),
        DType::U32 => ColumnSlice::U32(&[]),
        DType::I64 => ColumnSlice::I64(&[]),
        DType::U8 => ColumnSlice::U8(&[]),
        DType::Bool => ColumnSlice::Bool(&[]),
    }
}

/// `4, 84` for a shape `[4, 84]`, `` for a scalar.
fn dims(shape: &[usize]) -> String {
    shape
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The data pointer of an array.
fn data_ptr(array: &Bound<'_, PyUntypedArray>) -> *mut u8 {
    // SAFETY: `as_array_ptr` is a live `PyArrayObject` (we hold a reference); reading its
    // `data` field reads no element.
    unsafe { (*_PyArray_GET_ITEM_DATA(array.as_array_ptr())).data.cast() }
}

/// Every column of `schema` from a dict `name -> array`, checked (dtype, shape, equal
/// rows, no missing or unknown key) before anything is written; returns the arrays in
/// schema order and the number of rows.
pub(crate) fn columns_from_dict<'py>(
    schema: &Schema,
    data: &Bound<'py, PyAny>,
) -> PyResult<(Vec<InputArray<'py>>, usize)> {
    let dict = data.cast::<PyDict>().map_err(|_| {
        value_error("columns must be a dict mapping every column name to a numpy array")
    })?;
    let names = || {
        schema
            .columns()
            .iter()
            .map(Column::name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    for key in dict.keys() {
        let known = key
            .extract::<&str>()
            .ok()
            .is_some_and(|k| schema.index_of(k).is_some());
        if !known {
            return Err(value_error(format!(
                "{key} is not a column of this buffer (columns: {}); nothing was written",
                names()
            )));
        }
    }
    let mut arrays = Vec::with_capacity(schema.columns().len());
    let mut rows: Option<(usize, &str)> = None;
    for column in schema.columns() {
        let value = dict.get_item(column.name())?.ok_or_else(|| {
            value_error(format!(
                "column `{}` is missing: give an array for every column ({}); nothing was written",
                column.name(),
                names()
            ))
        })?;
        let (array, n) = InputArray::new(column, &value, false)?;
        match rows {
            None => rows = Some((n, column.name())),
            Some((first, first_name)) if first != n => {
                return Err(value_error(format!(
                    "column `{}` has {n} rows but `{first_name}` has {first}: give every column the same number of rows; nothing was written",
                    column.name()
                )));
            }
            Some(_) => {}
        }
        arrays.push(array);
    }
    let rows = rows.map_or(0, |(n, _)| n);
    if rows == 0 {
        return Err(value_error(
            "the arrays have zero rows: give at least one row",
        ));
    }
    Ok((arrays, rows))
}

/// A numpy array of `shape` over `len` bytes at `data`, owned by `owner` (kept alive as
/// the array's base), with the numpy dtype of `dtype`.
///
/// # Safety
/// `data` must be valid for reads and writes of `shape`'s elements of `dtype` (as bytes:
/// `product(shape) * dtype.size()`), aligned for `dtype`, and stay valid and unmoved for as
/// long as `owner` lives. Nothing else may hold a Rust reference to those bytes while
/// Python code can reach the array (the owner's methods re-borrow them only while they
/// hold the GIL or their own exclusive borrow of `owner`).
pub(crate) unsafe fn array_over<'py>(
    owner: &Bound<'py, PyAny>,
    data: *mut u8,
    dtype: DType,
    shape: &[usize],
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let py = owner.py();
    // SAFETY: for each view below, the caller guarantees `data` is valid, aligned and
    // large enough for `shape` elements of the type, for as long as `owner` lives, which
    // `borrow_from_array` makes the array's base object.
    let array: Bound<'py, PyAny> = unsafe {
        match dtype {
            DType::F32 => view::<f32>(owner, data, shape)?,
            DType::U32 => view::<u32>(owner, data, shape)?,
            DType::I64 => view::<i64>(owner, data, shape)?,
            DType::U8 => view::<u8>(owner, data, shape)?,
            // Flags are bytes: view them as uint8, then reinterpret as numpy bool (numpy's
            // bool is a byte; no Rust `bool` is ever made from them).
            DType::Bool => {
                view::<u8>(owner, data, shape)?.call_method1("view", (descr(py, DType::Bool),))?
            }
        }
    };
    array.cast_into::<PyUntypedArray>().map_err(PyErr::from)
}

/// A typed numpy view over `data`.
///
/// # Safety
/// As [`array_over`].
unsafe fn view<'py, T: numpy::Element>(
    owner: &Bound<'py, PyAny>,
    data: *mut u8,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the caller guarantees `data` holds `shape`'s elements of `T`, aligned, alive
    // as long as `owner`; the view is only used to build the numpy array right away.
    let view =
        unsafe { ArrayViewD::<T>::from_shape_ptr(IxDyn(shape), data.cast::<T>().cast_const()) };
    // SAFETY: `owner` keeps the memory alive and unmoved (the caller's guarantee) and
    // becomes the array's base, so the array cannot outlive it.
    let array = unsafe { PyArray::<T, IxDyn>::borrow_from_array(&view, owner.clone()) };
    Ok(array.into_any())
}

/// A mutable slice of a numpy array the crate created (a vector env's outputs).
///
/// # Safety
/// The array must be one the crate created (C-contiguous, owned by numpy, never
/// resized) and no other Rust reference to its data may be alive.
#[expect(
    clippy::mut_from_ref,
    reason = "a numpy array is a shared Python object: exclusive access is the caller's promise"
)]
pub(crate) unsafe fn slice_mut<'a, T: numpy::Element, D: numpy::ndarray::Dimension>(
    array: &'a Bound<'_, numpy::PyArray<T, D>>,
) -> PyResult<&'a mut [T]> {
    // SAFETY: per the caller, the array is contiguous and no Rust reference aliases it; we
    // hold the GIL, so no Python code touches it while the slice lives.
    unsafe { array.as_slice_mut() }.map_err(|e| PyRuntimeError::new_err(e.to_string()))
}
