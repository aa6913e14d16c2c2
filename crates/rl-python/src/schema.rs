//! Schemas from Python dicts (`name -> (dtype, shape)`) and back; numpy dtypes of columns.

use numpy::{PyArrayDescr, PyArrayDescrMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rl_core::{Column, DType, Schema};

use crate::error::{core_error, value_error};

/// The numpy dtype name of a column dtype.
pub(crate) fn numpy_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::U32 => "uint32",
        DType::I64 => "int64",
        DType::U8 => "uint8",
        DType::Bool => "bool",
    }
}

/// The numpy descriptor of a column dtype.
pub(crate) fn descr(py: Python<'_>, dtype: DType) -> Bound<'_, PyArrayDescr> {
    match dtype {
        DType::F32 => numpy::dtype::<f32>(py),
        DType::U32 => numpy::dtype::<u32>(py),
        DType::I64 => numpy::dtype::<i64>(py),
        DType::U8 => numpy::dtype::<u8>(py),
        DType::Bool => numpy::dtype::<bool>(py),
    }
}

/// The column dtype of anything `numpy.dtype` accepts (`"float32"`, `np.uint8`, ...).
fn column_dtype(name: &str, value: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = value.py();
    let given = PyArrayDescr::new(py, value).map_err(|err| {
        value_error(format!(
            "column `{name}`: {value} is not a numpy dtype ({err}): use one of float32, uint32, int64, uint8, bool"
        ))
    })?;
    let found = [DType::F32, DType::U32, DType::I64, DType::U8, DType::Bool]
        .into_iter()
        .find(|&d| given.is_equiv_to(&descr(py, d)));
    found.ok_or_else(|| {
        value_error(format!(
            "column `{name}` has dtype {given}, which buffers do not store: use one of float32, uint32 (discrete actions), int64, uint8 (pixels), bool (flags)"
        ))
    })
}

/// A shape given as a tuple (or list) of positive ints, or one int.
fn column_shape(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let bad = || {
        value_error(format!(
            "column `{name}` has shape {value}: give a tuple of positive ints, () for one value per row"
        ))
    };
    let dims: Vec<i64> = if let Ok(n) = value.extract::<i64>() {
        vec![n]
    } else {
        value.extract::<Vec<i64>>().map_err(|_| bad())?
    };
    dims.iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0).ok_or_else(bad))
        .collect()
}

/// A schema from a dict `name -> (dtype, shape)`, columns in the dict's order.
pub(crate) fn from_dict(schema: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let dict = schema.cast::<PyDict>().map_err(|_| {
        value_error("schema must be a dict mapping column names to (dtype, shape) tuples")
    })?;
    if dict.is_empty() {
        return Err(value_error(
            "schema has no columns: give at least one `name: (dtype, shape)`",
        ));
    }
    let mut columns = Vec::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        let name: String = key
            .extract()
            .map_err(|_| value_error(format!("schema key {key} is not a string")))?;
        let pair = value
            .cast::<PyTuple>()
            .ok()
            .filter(|t| t.len() == 2)
            .ok_or_else(|| {
                value_error(format!(
                    "column `{name}` is {value}: give a (dtype, shape) tuple, e.g. (\"float32\", (4,))"
                ))
            })?;
        let dtype = column_dtype(&name, &pair.get_item(0)?)?;
        let shape = column_shape(&name, &pair.get_item(1)?)?;
        columns.push(Column::new(name, dtype, &shape));
    }
    Schema::new(columns).map_err(core_error)
}

/// The schema as a dict `name -> (dtype name, shape tuple)`.
pub(crate) fn to_dict<'py>(py: Python<'py>, schema: &Schema) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for column in schema.columns() {
        let shape = PyTuple::new(py, column.shape())?;
        dict.set_item(column.name(), (numpy_name(column.dtype()), shape))?;
    }
    Ok(dict)
}
