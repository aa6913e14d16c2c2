//! Observation and action spaces.

use std::fmt;

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::schema::{DType, Element};

/// A set of valid observations or actions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Space {
    /// `n` actions, identified by a `u32` index in `0..n`. Never one-hot: the index is what
    /// gets stored; representations expand it per minibatch if a network needs that.
    Discrete {
        /// Number of actions, at least 1.
        n: u32,
    },
    /// A box of `f32` or `u8` values with per-element bounds.
    Box(BoxSpace),
}

impl Space {
    /// A discrete space of `n` actions.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `n` is zero.
    pub fn discrete(n: u32) -> Result<Self> {
        if n == 0 {
            return Err(Error::config(
                "discrete space",
                "has zero actions: use at least one",
            ));
        }
        Ok(Space::Discrete { n })
    }

    /// Number of elements in one value of this space (1 for a discrete index).
    pub fn flat_len(&self) -> usize {
        match self {
            Space::Discrete { .. } => 1,
            Space::Box(b) => b.flat_len(),
        }
    }

    /// Element type of one value (`u32` for discrete).
    pub fn dtype(&self) -> DType {
        match self {
            Space::Discrete { .. } => DType::U32,
            Space::Box(b) => b.dtype,
        }
    }

    /// Whether `value` (a flat slice) lies in the space: right element type, right length,
    /// within bounds, no NaN.
    pub fn contains<T: Element>(&self, value: &[T]) -> bool {
        match self {
            Space::Discrete { n } => {
                T::DTYPE == DType::U32 && value.len() == 1 && value[0].to_f64() < f64::from(*n)
            }
            Space::Box(b) => b.contains(value),
        }
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Space::Discrete { n } => write!(f, "Discrete({n})"),
            Space::Box(b) => write!(f, "Box({}, shape {:?})", b.dtype, b.shape.as_slice()),
        }
    }
}

/// A box of values with per-element (or uniform) bounds. Infinite bounds are allowed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoxSpace {
    /// Lower bounds: one per element, or a single one for all elements.
    low: Vec<f32>,
    /// Upper bounds, same layout as `low`.
    high: Vec<f32>,
    shape: SmallVec<[usize; 4]>,
    dtype: DType,
}

impl BoxSpace {
    /// A box with per-element bounds (`low.len() == high.len() == product(shape)`).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if lengths disagree, a bound is NaN, `low > high`, the
    /// shape has a zero dimension, or the dtype is not `f32` or `u8`.
    pub fn new(low: Vec<f32>, high: Vec<f32>, shape: &[usize], dtype: DType) -> Result<Self> {
        let numel: usize = shape.iter().product();
        if low.len() != numel || high.len() != numel {
            return Err(Error::config(
                "box space bounds",
                format!(
                    "have {} low and {} high values for a shape of {numel} elements: give one bound per element",
                    low.len(),
                    high.len()
                ),
            ));
        }
        Self::validated(low, high, shape, dtype)
    }

    /// A box whose elements all share the bounds `[low, high]`.
    ///
    /// # Errors
    /// As [`BoxSpace::new`].
    pub fn uniform(low: f32, high: f32, shape: &[usize], dtype: DType) -> Result<Self> {
        Self::validated(vec![low], vec![high], shape, dtype)
    }

    fn validated(low: Vec<f32>, high: Vec<f32>, shape: &[usize], dtype: DType) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::U8) {
            return Err(Error::config(
                "box space dtype",
                format!("is {dtype}: boxes hold f32 or u8 elements"),
            ));
        }
        if shape.contains(&0) {
            return Err(Error::config(
                "box space shape",
                format!("{shape:?} has a zero dimension: every dimension must be at least 1"),
            ));
        }
        if let Some(i) =
            (0..low.len()).find(|&i| low[i].partial_cmp(&high[i]).is_none_or(|o| o.is_gt()))
        {
            return Err(Error::config(
                "box space bounds",
                format!(
                    "element {i} has low {} and high {}: bounds must be numbers with low <= high",
                    low[i], high[i]
                ),
            ));
        }
        Ok(Self {
            low,
            high,
            shape: SmallVec::from_slice(shape),
            dtype,
        })
    }

    /// The shape of one value.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of elements of one value.
    pub fn flat_len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Lower bound of element `i`.
    pub fn low(&self, i: usize) -> f32 {
        self.low[if self.low.len() == 1 { 0 } else { i }]
    }

    /// Upper bound of element `i`.
    pub fn high(&self, i: usize) -> f32 {
        self.high[if self.high.len() == 1 { 0 } else { i }]
    }

    /// Whether `value` has this box's dtype and length and lies within the bounds.
    pub fn contains<T: Element>(&self, value: &[T]) -> bool {
        T::DTYPE == self.dtype
            && value.len() == self.flat_len()
            && value.iter().enumerate().all(|(i, v)| {
                let v = v.to_f64();
                f64::from(self.low(i)) <= v && v <= f64::from(self.high(i))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discrete_contains_only_in_range_u32_indices() {
        let space = Space::discrete(3).unwrap();
        assert!(space.contains(&[2u32]));
        assert!(!space.contains(&[3u32]));
        assert!(!space.contains(&[1u32, 1]));
        assert!(!space.contains(&[1.0f32]));
        assert!(Space::discrete(0).is_err());
    }

    #[test]
    fn box_contains_checks_bounds_length_dtype_and_nan() {
        let space = Space::Box(
            BoxSpace::new(vec![-1.0, 0.0], vec![1.0, f32::INFINITY], &[2], DType::F32).unwrap(),
        );
        assert!(space.contains(&[0.5f32, 1e30]));
        assert!(!space.contains(&[1.5f32, 0.0]));
        assert!(!space.contains(&[0.0f32, f32::NAN]));
        assert!(!space.contains(&[0.0f32]));
        assert!(!space.contains(&[0u8, 0]));
        assert_eq!(space.flat_len(), 2);
    }

    #[test]
    fn pixel_boxes_are_u8() {
        let frames = BoxSpace::uniform(0.0, 255.0, &[4, 84, 84], DType::U8).unwrap();
        assert_eq!(frames.flat_len(), 4 * 84 * 84);
        assert!(frames.contains(&vec![255u8; 4 * 84 * 84]));
        assert!(!frames.contains(&vec![0.0f32; 4 * 84 * 84]));
    }

    #[test]
    fn bad_boxes_are_refused() {
        assert!(BoxSpace::new(vec![0.0], vec![1.0, 2.0], &[2], DType::F32).is_err());
        assert!(BoxSpace::uniform(1.0, 0.0, &[2], DType::F32).is_err());
        assert!(BoxSpace::uniform(f32::NAN, 0.0, &[2], DType::F32).is_err());
        assert!(BoxSpace::uniform(0.0, 1.0, &[2], DType::I64).is_err());
        assert!(BoxSpace::uniform(0.0, 1.0, &[0], DType::F32).is_err());
    }
}
