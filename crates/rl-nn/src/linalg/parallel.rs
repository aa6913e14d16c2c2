//! Large products split across the threads of a [`Pool`] by blocks of `dst` rows.

#![allow(
    unsafe_code,
    reason = "the pool's tasks write disjoint row or column blocks of one destination slice"
)]

use std::cell::RefCell;
use std::ops::Range;

use super::{Accumulate, MatRef, check_shapes, kernel};
use crate::pool::Pool;

/// `dst (+)= lhs * rhs` as [`matmul`](super::matmul), split across the threads of `pool`
/// when the product is large: contiguous blocks of `dst` rows, one per thread, the first
/// on the calling thread; a product with too few rows for that (acting on a few
/// observations through a wide layer) is split by blocks of columns instead, so each
/// thread also packs only its part of `rhs`. Each element is computed by one thread in
/// the order of summation [`matmul`](super::matmul) uses, so the result is bit-identical
/// to [`matmul`](super::matmul)'s whatever the pool's size. Products below about a million
/// multiply-adds, and thin ones (an inner dimension or a column count of at most 4), run
/// on the calling thread alone: waking workers would cost more than it saves. Allocates
/// nothing once each thread has run a product of this shape.
///
/// # Panics
/// As [`matmul`](super::matmul).
pub fn matmul_on(
    pool: &Pool,
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    accumulate: Accumulate,
) {
    let shape = check_shapes(dst, lhs, rhs);
    let isa = rl_core::simd::Isa::detect();
    split(Some(pool), dst, shape, accumulate, &|dst, rows, cols| {
        kernel::matmul_with(
            isa,
            dst,
            row_block(lhs, rows),
            col_block(rhs, cols),
            accumulate,
        );
    });
}

/// Rows `rows` of `view`.
pub(super) fn row_block(view: MatRef<'_>, rows: Range<usize>) -> MatRef<'_> {
    MatRef {
        data: &view.data[rows.start * view.row_stride..],
        rows: rows.len(),
        ..view
    }
}

/// Columns `cols` of `view`.
pub(super) fn col_block(view: MatRef<'_>, cols: Range<usize>) -> MatRef<'_> {
    MatRef {
        data: &view.data[cols.start * view.col_stride..],
        cols: cols.len(),
        ..view
    }
}

thread_local! {
    /// A task's block of `dst` columns, row-major (grown once per thread and shape).
    static COLUMNS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Computes the block of a product's `dst` at `(rows, cols)` into the slice given.
pub(super) type Block<'a> = dyn Fn(&mut [f32], Range<usize>, Range<usize>) + Sync + 'a;

/// Runs an `m x k x n` product whose blocks `block(dst, rows, cols)` computes (`dst`
/// row-major, `rows.len() x cols.len()`, its values `dst`'s when adding): on the calling
/// thread alone without a pool or for a small or thin product; else split across
/// `pool`'s threads by rows ([`kernel::parallel_rows`]), or by columns when there are too
/// few rows ([`kernel::parallel_cols`]: blocks of multiples of 64 columns, the last
/// taking the rest; each task multiplies into its own row-major block, starting from
/// `dst`'s values when adding, and copies it into its columns of `dst`).
pub(super) fn split(
    pool: Option<&Pool>,
    dst: &mut [f32],
    (m, k, n): (usize, usize, usize),
    accumulate: Accumulate,
    block: &Block<'_>,
) {
    let threads = pool.map_or(1, Pool::threads);
    let rows = kernel::parallel_rows(m, k, n, threads);
    let cols = kernel::parallel_cols(m, k, n, threads);
    let pool = match pool {
        Some(pool) if rows < m || cols < n => pool,
        _ => return block(dst, 0..m, 0..n),
    };
    let out = SendPtr(dst.as_mut_ptr());
    if rows < m {
        pool.run(m.div_ceil(rows), &|task| {
            let (start, end) = (task * rows, ((task + 1) * rows).min(m));
            // SAFETY:
            // - `dst` holds `m * n` floats and is borrowed mutably for this whole call,
            //   which returns only after every task has finished;
            // - task `task` writes rows `start..end` only: the blocks of distinct tasks
            //   are disjoint, and `end <= m`.
            let dst =
                unsafe { std::slice::from_raw_parts_mut(out.at(start * n), (end - start) * n) };
            block(dst, start..end, 0..n);
        });
        return;
    }
    // Blocks of `cols` columns, the last one taking the rest.
    let tasks = (n / cols).min(pool.threads());
    pool.run(tasks, &|task| {
        let start = task * cols;
        let end = if task + 1 == tasks { n } else { start + cols };
        let width = end - start;
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
            block(part, 0..m, start..end);
            for (i, from) in part.chunks_exact(width).enumerate() {
                row(i).copy_from_slice(from);
            }
        });
    });
}

/// The destination's pointer, shared with the pool's tasks (each writes its own rows).
#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut f32);

impl SendPtr {
    /// The pointer `offset` floats in (a method, so closures capture the whole wrapper).
    pub(super) fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY:
// - `split` gives each task a disjoint block of rows (or of columns) behind the pointer
//   and waits for all of them before the borrow it came from ends; `WeightPack` gives
//   each task disjoint panels the same way.
unsafe impl Sync for SendPtr {}
