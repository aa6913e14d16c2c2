//! The dense matrix product every layer is built on.
//!
//! One function, [`matmul`], over strided read-only views ([`MatRef`]) so that layers
//! multiply by transposes without copying. It runs on one thread on the crate's own
//! kernel (`kernel.rs`), which runs its AVX-512, AVX2 or portable code as
//! [`rl_core::simd::Isa::detect`] chose at run time from the CPU it finds (the repository
//! sets no `target-cpu`) and, unlike the `gemm` crate it replaced, allocates nothing after
//! warm-up.

/// A read-only strided matrix view: element `(i, j)` is
/// `data[i * row_stride + j * col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// A row-major `rows x cols` matrix.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The `rows x cols` transpose of a row-major `cols x rows` matrix, without copying.
    pub fn transposed(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            row_stride: 1,
            col_stride: rows,
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The slice the view reads.
    #[allow(
        dead_code,
        reason = "the allocation-free kernel reads views through it"
    )]
    pub(crate) fn data(&self) -> &'a [f32] {
        self.data
    }

    /// Distance between rows, in elements.
    #[allow(
        dead_code,
        reason = "the allocation-free kernel reads views through it"
    )]
    pub(crate) fn row_stride(&self) -> usize {
        self.row_stride
    }

    /// Distance between columns, in elements.
    #[allow(
        dead_code,
        reason = "the allocation-free kernel reads views through it"
    )]
    pub(crate) fn col_stride(&self) -> usize {
        self.col_stride
    }

    /// Whether every element lies inside the slice.
    fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1)
                .checked_mul(self.row_stride)
                .zip((self.cols - 1).checked_mul(self.col_stride))
                .and_then(|(a, b)| a.checked_add(b))
                .is_some_and(|last| last < self.data.len())
    }
}

/// Whether [`matmul`] overwrites its destination or adds to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accumulate {
    /// `dst = lhs * rhs`.
    Overwrite,
    /// `dst += lhs * rhs`.
    Add,
}

/// `dst (m x n, row-major) = lhs (m x k) * rhs (k x n)`, or `+=` with [`Accumulate::Add`],
/// on the calling thread. Allocates nothing once the calling thread has run a product of
/// this shape (or a larger one): packing scratch is thread-local and only grows.
///
/// # Panics
/// If the shapes do not agree or a view leaves its slice. Layers pass shapes they
/// computed themselves, so this is a bug check, never a user error.
pub fn matmul(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: Accumulate) {
    check_shapes(dst, lhs, rhs);
    kernel::matmul(dst, lhs, rhs, accumulate);
}

/// `(m, k, n)` of a product.
///
/// # Panics
/// If the shapes do not agree or a view leaves its slice.
fn check_shapes(dst: &[f32], lhs: MatRef<'_>, rhs: MatRef<'_>) -> (usize, usize, usize) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert!(
        rhs.rows == k && m.checked_mul(n) == Some(dst.len()) && lhs.in_bounds() && rhs.in_bounds(),
        "matmul shapes: dst {} for {m}x{k} * {}x{n}",
        dst.len(),
        rhs.rows
    );
    (m, k, n)
}

mod kernel;
mod packed;
mod parallel;
mod peak;

#[cfg(target_arch = "x86_64")]
pub(crate) use kernel::transpose8;
pub(crate) use packed::WeightPack;
pub use parallel::matmul_on;

/// Rows per thread when a product is split (`m`: not split); for the pool's tests.
#[cfg(test)]
pub(crate) fn parallel_rows_for_tests(m: usize, k: usize, n: usize, threads: usize) -> usize {
    kernel::parallel_rows(m, k, n, threads)
}

/// Columns per thread when a short product is split by columns (`n`: not split); for
/// the pool's tests.
#[cfg(test)]
pub(crate) fn parallel_cols_for_tests(m: usize, k: usize, n: usize, threads: usize) -> usize {
    kernel::parallel_cols(m, k, n, threads)
}
pub use peak::{FmaPeak, fma_peak};

#[cfg(test)]
mod tests;
