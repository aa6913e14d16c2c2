//! Weight operands packed once and reused while they do not change.
//!
//! A blocked product packs its `rhs` into panels first ([`kernel`]); for the `W^T` of a
//! forward pass that is one strided pass over the whole weight, every call. A network
//! acting on a few observations (PPO's 8 environments through a 3136 x 512 layer, DQN's
//! one) packs 6.4 MB to multiply a few rows, and a recurrent cell packs `W_hh^T` at every
//! step of a sequence. A [`WeightPack`] keeps the panels of one weight with the version
//! of the parameters they came from, so the next product with the same weight reuses
//! them; on a pool, the packing itself is split by blocks of panels, so two threads no
//! longer both pack the whole operand of a product they split by rows.

#![allow(
    unsafe_code,
    reason = "the pool's tasks pack disjoint panels of one buffer"
)]

use rl_core::simd::Isa;

use super::parallel::{SendPtr, col_block, row_block, split};
use super::{Accumulate, MatRef, check_shapes, kernel};
use crate::pool::Pool;

/// Floats between the start of a buffer and its first 64-byte boundary, at most.
const ALIGN: usize = 16;

/// Packed floats below which a pool's workers are not woken to share the packing.
const PARALLEL_PACK: usize = 1 << 16;

/// What a pack was made from: the same key means the same panels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    isa: Isa,
    nr: usize,
    data: usize,
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
    version: u64,
}

/// The packed panels of one weight operand, reused by [`WeightPack::matmul`] while the
/// operand's parameters keep their version (see `crate::version::Version`).
///
/// Sized for its weight when made ([`WeightPack::bytes`]), so products with it allocate
/// nothing; a pack made [`WeightPack::empty`] grows on its first product.
#[derive(Debug, Default)]
pub(crate) struct WeightPack {
    buffer: Vec<f32>,
    key: Option<Key>,
}

/// A clone holds as much room and no panels: its buffer may start at another offset
/// from a 64-byte boundary, so the panels are packed again on its first product.
impl Clone for WeightPack {
    fn clone(&self) -> Self {
        Self {
            buffer: vec![0.0; self.buffer.len()],
            key: None,
        }
    }
}

impl WeightPack {
    /// No panels; the first product allocates them.
    pub(crate) const fn empty() -> Self {
        Self {
            buffer: Vec::new(),
            key: None,
        }
    }

    /// Room for a `k x n` weight operand packed by any kernel (panels at most 64 wide).
    ///
    /// # Panics
    /// If its size overflows ([`WeightPack::bytes`] is `None`).
    pub(crate) fn for_operand(k: usize, n: usize) -> Self {
        let bytes = Self::bytes(k, n).expect("a weight pack's size overflows");
        Self {
            buffer: vec![0.0; bytes / size_of::<f32>()],
            key: None,
        }
    }

    /// Bytes [`WeightPack::for_operand`] holds for a `k x n` operand; `None` on overflow.
    pub(crate) fn bytes(k: usize, n: usize) -> Option<usize> {
        k.checked_mul(n.checked_next_multiple_of(64)?)?
            .checked_add(ALIGN)?
            .checked_mul(size_of::<f32>())
    }

    /// Whether a forward pass `x W^T` through a `k -> n` layer takes panels, which a
    /// pack can keep: not for the thin products of at most 4 inputs or outputs.
    pub(crate) const fn packs_layer(k: usize, n: usize) -> bool {
        k > 4 && n > 4
    }

    /// Bytes it holds.
    pub(crate) fn memory_bytes(&self) -> u64 {
        (self.buffer.capacity() * size_of::<f32>()) as u64
    }

    /// `dst (+)= lhs * rhs` as [`matmul_on`](super::matmul_on) (or
    /// [`matmul`](super::matmul) without a pool), bit-identical to it, where `rhs`'s
    /// values are those of parameters at `version`: when the last product through this
    /// pack had the same operand at the same version (same slice, shape and strides), its
    /// panels are reused instead of packed again. Thin products, which take no panels,
    /// run as they would without it.
    ///
    /// # Panics
    /// As [`matmul`](super::matmul).
    pub(crate) fn matmul(
        &mut self,
        pool: Option<&Pool>,
        version: u64,
        dst: &mut [f32],
        lhs: MatRef<'_>,
        rhs: MatRef<'_>,
        accumulate: Accumulate,
    ) {
        self.matmul_with(Isa::detect(), pool, version, dst, (lhs, rhs), accumulate);
    }

    /// [`WeightPack::matmul`] on the kernels of `isa`.
    ///
    /// # Panics
    /// As [`matmul`](super::matmul), or if the CPU lacks `isa`.
    fn matmul_with(
        &mut self,
        isa: Isa,
        pool: Option<&Pool>,
        version: u64,
        dst: &mut [f32],
        (lhs, rhs): (MatRef<'_>, MatRef<'_>),
        accumulate: Accumulate,
    ) {
        let shape = check_shapes(dst, lhs, rhs);
        let (m, k, n) = shape;
        assert!(
            isa.is_supported(),
            "this CPU cannot run the {isa:?} kernels"
        );
        let nr = match kernel::panel_width(isa, lhs, rhs) {
            Some(nr) if m > 0 && k > 0 && n > 0 => nr,
            _ => {
                return split(pool, dst, shape, accumulate, &|dst, rows, cols| {
                    kernel::matmul_with(
                        isa,
                        dst,
                        row_block(lhs, rows),
                        col_block(rhs, cols),
                        accumulate,
                    );
                });
            }
        };
        let key = Key {
            isa,
            nr,
            data: rhs.data.as_ptr() as usize,
            rows: k,
            cols: n,
            row_stride: rhs.row_stride,
            col_stride: rhs.col_stride,
            version,
        };
        if self.key != Some(key) {
            self.key = None;
            self.pack(pool, isa, nr, rhs);
            self.key = Some(key);
        }
        let n_pad = n.next_multiple_of(nr);
        let data = &aligned(&mut self.buffer, kernel::packed_len(k, n, nr))[..];
        split(pool, dst, shape, accumulate, &|dst, rows, cols| {
            let panels = kernel::Panels {
                data,
                nr,
                n_pad,
                first: cols.start / nr,
            };
            kernel::matmul_prepacked(
                isa,
                dst,
                row_block(lhs, rows),
                col_block(rhs, cols),
                panels,
                accumulate,
            );
        });
    }

    /// Packs all of `rhs` for the kernel `nr` columns wide, split by blocks of panels
    /// across `pool` when it is large.
    fn pack(&mut self, pool: Option<&Pool>, isa: Isa, nr: usize, rhs: MatRef<'_>) {
        let (k, n) = (rhs.rows, rhs.cols);
        let panels = aligned(&mut self.buffer, kernel::packed_len(k, n, nr));
        let out = SendPtr(panels.as_mut_ptr());
        let count = n.div_ceil(nr);
        let threads = match pool {
            Some(pool) if k * n >= PARALLEL_PACK => pool.threads().min(count),
            _ => 1,
        };
        let per_task = count.div_ceil(threads);
        let task = |task: usize| {
            let start = (task * per_task * nr).min(n);
            let end = ((task + 1) * per_task * nr).min(n);
            // SAFETY:
            // - `Isa::detect` only returns instruction sets the CPU supports, and
            //   `panel_width` returned `nr` for one of its kernels;
            // - `start` is a multiple of `nr`, and `end` is one too or is `n`;
            // - `out` points at `packed_len(k, n, nr)` floats, 64-byte aligned, borrowed
            //   mutably for this call; tasks pack disjoint blocks of panels.
            unsafe { kernel::pack_columns(isa, nr, out.at(0), rhs, start..end) };
        };
        match pool {
            Some(pool) if threads > 1 => pool.run(threads, &task),
            _ => task(0),
        }
    }
}

/// A 64-byte-aligned slice of `len` floats inside `buffer`, growing it if it is too short
/// (the only allocation of a pack, on its first product if it was made empty).
fn aligned(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buffer.len() < len + ALIGN {
        buffer.resize(len + ALIGN, 0.0);
    }
    let misalign = (buffer.as_ptr() as usize / size_of::<f32>()) % ALIGN;
    let start = (ALIGN - misalign) % ALIGN;
    &mut buffer[start..start + len]
}

#[cfg(test)]
mod tests;
