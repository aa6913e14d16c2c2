//! Large products split across the threads of a [`Pool`] by blocks of `dst` rows.

#![allow(
    unsafe_code,
    reason = "the pool's tasks write disjoint row or column blocks of one destination slice"
)]

use std::cell::RefCell;

use super::{Accumulate, MatRef, check_shapes, kernel, matmul};
use crate::pool::Pool;

/// `dst (+)= lhs * rhs` as [`matmul`], split across the threads of `pool` when the
/// product is large: contiguous blocks of `dst` rows, one per thread, the first on the
/// calling thread; a product with too few rows for that (acting on a few observations
/// through a wide layer) is split by blocks of columns instead, so each thread also packs
/// only its part of `rhs`. Each element is computed by one thread in the order of
/// summation [`matmul`] uses, so the result is bit-identical to [`matmul`]'s whatever the
/// pool's size. Products below about a million multiply-adds, and thin ones (an inner
/// dimension or a column count of at most 4), run on the calling thread alone: waking
/// workers would cost more than it saves. Allocates nothing once each thread has run a
/// product of this shape.
///
/// # Panics
/// As [`matmul`].
pub fn matmul_on(
    pool: &Pool,
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    accumulate: Accumulate,
) {
    let (m, k, n) = check_shapes(dst, lhs, rhs);
    let isa = rl_core::simd::Isa::detect();
    let rows = kernel::parallel_rows(m, k, n, pool.threads());
    if rows >= m {
        let cols = kernel::parallel_cols(m, k, n, pool.threads());
        if cols >= n {
            matmul(dst, lhs, rhs, accumulate);
        } else {
            by_columns(pool, isa, cols, dst, (lhs, rhs), accumulate);
        }
        return;
    }
    let tasks = m.div_ceil(rows);
    let out = SendPtr(dst.as_mut_ptr());
    pool.run(tasks, &|task| {
        let (start, end) = (task * rows, ((task + 1) * rows).min(m));
        let block = MatRef {
            data: &lhs.data[start * lhs.row_stride..],
            rows: end - start,
            ..lhs
        };
        // SAFETY:
        // - `dst` holds `m * n` floats and is borrowed mutably for this whole call, which
        //   returns only after every task has finished;
        // - task `task` writes rows `start..end` only: the blocks of distinct tasks are
        //   disjoint, and `end <= m`.
        let dst = unsafe { std::slice::from_raw_parts_mut(out.at(start * n), (end - start) * n) };
        kernel::matmul_with(isa, dst, block, rhs, accumulate);
    });
}

thread_local! {
    /// A task's block of `dst` columns, row-major (grown once per thread and shape).
    static COLUMNS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// [`matmul_on`] by blocks of `cols` columns of `dst` (and `rhs`), the last block taking
/// the rest ([`kernel::parallel_cols`]): each task multiplies
/// into its own row-major block (starting from `dst`'s values when adding) and copies it
/// into its columns of `dst`.
fn by_columns(
    pool: &Pool,
    isa: rl_core::simd::Isa,
    cols: usize,
    dst: &mut [f32],
    (lhs, rhs): (MatRef<'_>, MatRef<'_>),
    accumulate: Accumulate,
) {
    let (m, n) = (lhs.rows, rhs.cols);
    // Blocks of `cols` columns, the last one taking the rest.
    let tasks = (n / cols).min(pool.threads());
    let out = SendPtr(dst.as_mut_ptr());
    pool.run(tasks, &|task| {
        let start = task * cols;
        let end = if task + 1 == tasks { n } else { start + cols };
        let width = end - start;
        let block = MatRef {
            data: &rhs.data[start * rhs.col_stride..],
            cols: width,
            ..rhs
        };
        // SAFETY:
        // - `dst` holds `m * n` floats and is borrowed mutably for this whole call, which
        //   returns only after every task has finished;
        // - task `task` reads and writes columns `start..end` of each row only: disjoint
        //   between tasks, and `end <= n`.
        let row =
            |i: usize| unsafe { std::slice::from_raw_parts_mut(out.at(i * n + start), width) };
        COLUMNS.with(|columns| {
            let mut columns = columns.borrow_mut();
            if columns.len() < m * width {
                columns.resize(m * width, 0.0);
            }
            let part = &mut columns[..m * width];
            if accumulate == Accumulate::Add {
                for (i, into) in part.chunks_exact_mut(width).enumerate() {
                    into.copy_from_slice(row(i));
                }
            }
            kernel::matmul_with(isa, part, lhs, block, accumulate);
            for (i, from) in part.chunks_exact(width).enumerate() {
                row(i).copy_from_slice(from);
            }
        });
    });
}

/// The destination's pointer, shared with the pool's tasks (each writes its own rows).
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);

impl SendPtr {
    /// The pointer `offset` floats in (a method, so closures capture the whole wrapper).
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY:
// - `matmul_on` gives each task a disjoint block of rows (or of columns) behind the
//   pointer and waits for all of them before the borrow it came from ends.
unsafe impl Sync for SendPtr {}
