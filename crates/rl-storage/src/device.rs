//! Device memory behind one interface: a CUDA GPU, or host memory standing in for one;
//! and the buffers on it: [`DeviceReplay`] (columns in device memory), [`ToDevice`] (host
//! batches moved through a reused staging buffer) and [`TieredReplay`] (a memmap file with
//! the newest rows also on the device).
//!
//! Storages and transfers that put rows on a device are generic over [`DeviceBackend`].
//! The CUDA backend ([`CudaDevice`], feature `cuda`) is the real thing;
//! [`FakeDevice`] keeps "device" buffers in host memory behind the same interface, so the
//! logic above it (tiers, indices, staging, error paths) is tested on every CI run, on
//! machines without a GPU.

#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use crate::cuda::{CudaBuffer, CudaStaging};
pub use crate::cuda::{CudaDevice, cuda_initializations, libcuda_loaded};
pub use crate::device_replay::{DeviceReplay, DeviceReplayOptions};
pub use crate::tiered::{TierCounts, TieredConfig, TieredReplay};
pub use crate::transfer::ToDevice;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rl_core::{Device, Element, Location, MemoryPlan, Schema};

use crate::column::column_index;
use crate::error::{Error, Result};

/// Operations a device offers to storages: allocate, copy in and out, gather rows.
///
/// Byte-oriented on purpose: columns are plain old data, and one gather kernel serves
/// every dtype. Calls may be asynchronous on the device; [`DeviceBackend::synchronize`]
/// waits for them.
pub trait DeviceBackend: Send + Sync + fmt::Debug {
    /// A device allocation of bytes.
    type Buffer: Send + fmt::Debug;
    /// A host buffer the device copies from quickly (page-locked on CUDA).
    type Staging: Send + fmt::Debug;

    /// The device, as plain data.
    fn device(&self) -> Device;

    /// A zeroed device buffer of `bytes` bytes.
    ///
    /// # Errors
    /// Out of device memory, or a driver error.
    fn alloc(&self, bytes: usize) -> Result<Self::Buffer>;

    /// Size of a device buffer in bytes.
    fn len(&self, buffer: &Self::Buffer) -> usize;

    /// A host staging buffer of `bytes` bytes.
    ///
    /// # Errors
    /// Out of (page-locked) host memory, or a driver error.
    fn alloc_staging(&self, bytes: usize) -> Result<Self::Staging>;

    /// The staging buffer's bytes, to fill before [`DeviceBackend::upload_staging`].
    ///
    /// # Errors
    /// A driver error (CUDA waits for earlier copies out of the buffer first).
    fn staging_mut<'a>(&self, staging: &'a mut Self::Staging) -> Result<&'a mut [u8]>;

    /// Copies `src` from host memory to `dst` at byte `offset`.
    ///
    /// # Errors
    /// Out-of-range copy, or a driver error.
    fn upload(&self, src: &[u8], dst: &mut Self::Buffer, offset: usize) -> Result<()>;

    /// Copies the first `len` bytes of `staging` to `dst` at byte `offset`: the fast path
    /// for batches.
    ///
    /// # Errors
    /// Out-of-range copy, or a driver error.
    fn upload_staging(
        &self,
        staging: &Self::Staging,
        len: usize,
        dst: &mut Self::Buffer,
        offset: usize,
    ) -> Result<()>;

    /// Copies `dst.len()` bytes of `src` from byte `offset` into host memory (waits).
    ///
    /// # Errors
    /// Out-of-range copy, or a driver error.
    fn download(&self, src: &Self::Buffer, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// On the device: for `j` in `0..rows`, copies row `pairs[2j]` of `src` (rows of
    /// `row_bytes`) to row `pairs[2j + 1]` of `dst`. `pairs` is a device buffer of `u32`
    /// (source position, destination slot) pairs. A plain gather uses slots `0..rows`; a
    /// tiered gather fills some slots from each tier.
    ///
    /// # Errors
    /// Out-of-range rows, or a driver error.
    fn gather(
        &self,
        src: &Self::Buffer,
        row_bytes: usize,
        pairs: &Self::Buffer,
        rows: usize,
        dst: &mut Self::Buffer,
    ) -> Result<()>;

    /// Waits until every operation issued so far has finished.
    ///
    /// # Errors
    /// A driver error from an earlier asynchronous operation.
    fn synchronize(&self) -> Result<()>;
}

/// Host memory standing in for a GPU: the same interface and checks, no driver.
///
/// Counts the bytes it holds ([`FakeDevice::allocated_bytes`]) so tests can check what a
/// storage put "on the device".
#[derive(Clone, Debug, Default)]
pub struct FakeDevice {
    allocated: Arc<AtomicU64>,
}

/// A [`FakeDevice`] buffer.
#[derive(Debug)]
pub struct FakeBuffer {
    bytes: Vec<u8>,
    allocated: Arc<AtomicU64>,
}

impl Drop for FakeBuffer {
    fn drop(&mut self) {
        self.allocated
            .fetch_sub(self.bytes.len() as u64, Ordering::Relaxed);
    }
}

impl FakeDevice {
    /// A fake device holding nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes currently allocated on the fake device (staging buffers excluded).
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }
}

fn out_of_range(what: &str, offset: usize, len: usize, size: usize) -> Error {
    Error::config(
        format!("device {what}"),
        format!("of {len} bytes at offset {offset} does not fit a buffer of {size} bytes"),
    )
}

fn range(what: &str, offset: usize, len: usize, size: usize) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(offset..end),
        _ => Err(out_of_range(what, offset, len, size)),
    }
}

impl DeviceBackend for FakeDevice {
    type Buffer = FakeBuffer;
    type Staging = Vec<u8>;

    fn device(&self) -> Device {
        Device::Cuda(0)
    }

    fn alloc(&self, bytes: usize) -> Result<FakeBuffer> {
        self.allocated.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(FakeBuffer {
            bytes: vec![0; bytes],
            allocated: Arc::clone(&self.allocated),
        })
    }

    fn len(&self, buffer: &FakeBuffer) -> usize {
        buffer.bytes.len()
    }

    fn alloc_staging(&self, bytes: usize) -> Result<Vec<u8>> {
        Ok(vec![0; bytes])
    }

    fn staging_mut<'a>(&self, staging: &'a mut Vec<u8>) -> Result<&'a mut [u8]> {
        Ok(staging)
    }

    fn upload(&self, src: &[u8], dst: &mut FakeBuffer, offset: usize) -> Result<()> {
        let range = range("upload", offset, src.len(), dst.bytes.len())?;
        dst.bytes[range].copy_from_slice(src);
        Ok(())
    }

    fn upload_staging(
        &self,
        staging: &Vec<u8>,
        len: usize,
        dst: &mut FakeBuffer,
        offset: usize,
    ) -> Result<()> {
        let source = staging
            .get(..len)
            .ok_or_else(|| out_of_range("staging upload", 0, len, staging.len()))?;
        self.upload(source, dst, offset)
    }

    fn download(&self, src: &FakeBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        let range = range("download", offset, dst.len(), src.bytes.len())?;
        dst.copy_from_slice(&src.bytes[range]);
        Ok(())
    }

    fn gather(
        &self,
        src: &FakeBuffer,
        row_bytes: usize,
        pairs: &FakeBuffer,
        rows: usize,
        dst: &mut FakeBuffer,
    ) -> Result<()> {
        let pair_bytes = range("gather pairs", 0, rows * 8, pairs.bytes.len())?;
        for pair in pairs.bytes[pair_bytes].chunks_exact(8) {
            let (source, slot) = pair.split_at(4);
            let read = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            let from = range(
                "gather source row",
                read(source) * row_bytes,
                row_bytes,
                src.bytes.len(),
            )?;
            let to = range(
                "gather destination row",
                read(slot) * row_bytes,
                row_bytes,
                dst.bytes.len(),
            )?;
            dst.bytes[to].copy_from_slice(&src.bytes[from]);
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// Encodes (source position, destination slot) pairs as the little-endian `u32`s
/// [`DeviceBackend::gather`] reads, into `out` (8 bytes per pair). Allocates nothing.
///
/// # Errors
/// A position or slot above `u32::MAX`, or `out` too small.
pub fn encode_pairs(
    pairs: impl ExactSizeIterator<Item = (usize, usize)>,
    out: &mut [u8],
) -> Result<usize> {
    let rows = pairs.len();
    if out.len() < rows * 8 {
        return Err(out_of_range("gather pair staging", 0, rows * 8, out.len()));
    }
    for ((position, slot), bytes) in pairs.zip(out.chunks_exact_mut(8)) {
        let narrow = |v: usize| {
            u32::try_from(v)
                .map_err(|_| Error::config("gather position", format!("{v} exceeds u32::MAX")))
        };
        bytes[..4].copy_from_slice(&narrow(position)?.to_le_bytes());
        bytes[4..].copy_from_slice(&narrow(slot)?.to_le_bytes());
    }
    Ok(rows * 8)
}

/// Rows gathered on a device: one device buffer per column, plus (on the host) the
/// storage positions the rows came from and their importance weights. Allocated once,
/// reused for every sample.
#[derive(Debug)]
pub struct DeviceBatch<D: DeviceBackend> {
    schema: Schema,
    room: usize,
    columns: Vec<D::Buffer>,
    positions: Vec<usize>,
    weights: Vec<f32>,
    len: usize,
}

impl<D: DeviceBackend> DeviceBatch<D> {
    /// A batch for `schema` with room for `rows` rows, allocated on `device`.
    ///
    /// # Errors
    /// Zero rows, overflow, or out of device memory.
    pub fn new(device: &D, schema: &Schema, rows: usize) -> Result<Self> {
        let plan = Self::plan(schema, rows)?;
        let columns = plan
            .lines()
            .iter()
            .take(schema.columns().len())
            .map(|line| device.alloc(line.bytes as usize))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            schema: schema.clone(),
            room: rows,
            columns,
            positions: vec![0; rows],
            weights: vec![1.0; rows],
            len: 0,
        })
    }

    /// Device bytes of a batch of `rows` rows of `schema`, one line per column.
    ///
    /// # Errors
    /// Zero rows or overflow.
    pub fn plan(schema: &Schema, rows: usize) -> Result<MemoryPlan> {
        if rows == 0 {
            return Err(Error::config(
                "batch rows",
                "is zero: a batch needs room for at least one row",
            ));
        }
        let mut plan = MemoryPlan::new();
        for column in schema.columns() {
            let bytes = column.row_bytes().checked_mul(rows).ok_or_else(|| {
                Error::config(
                    "batch rows",
                    format!("{rows} rows overflow the address space"),
                )
            })?;
            plan.add(
                format!("device_batch/{}", column.name()),
                Location::Gpu,
                bytes as u64,
            );
        }
        Ok(plan)
    }

    /// The schema the batch was made for.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Rows gathered by the last sample.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maximum rows the batch holds.
    pub fn room(&self) -> usize {
        self.room
    }

    /// Storage positions of the gathered rows.
    pub fn positions(&self) -> &[usize] {
        &self.positions[..self.len]
    }

    /// Importance weights of the gathered rows.
    pub fn weights(&self) -> &[f32] {
        &self.weights[..self.len]
    }

    /// The device buffer of column `name` (`len` rows are valid).
    ///
    /// # Errors
    /// Unknown column.
    pub fn column(&self, name: &str) -> Result<&D::Buffer> {
        Ok(&self.columns[column_index(&self.schema, name)?])
    }

    /// Copies the gathered rows of column `name` to host memory (for tests and
    /// debugging; waits for the device).
    ///
    /// # Errors
    /// Unknown column, a dtype other than the column's, `out` of the wrong length, or a
    /// driver error.
    pub fn download<T: Element>(&self, device: &D, name: &str, out: &mut [T]) -> Result<()> {
        let index = column_index(&self.schema, name)?;
        let column = &self.schema.columns()[index];
        if T::DTYPE != column.dtype() {
            return Err(Error::DTypeMismatch {
                column: column.name().to_owned(),
                expected: column.dtype(),
                actual: T::DTYPE,
            });
        }
        rl_core::env::check_len("download buffer", self.len * column.numel(), out.len())?;
        device.download(&self.columns[index], 0, bytemuck::cast_slice_mut(out))
    }

    /// Everything a filler needs at once: the schema, the column buffers, and room for
    /// positions and weights.
    pub(crate) fn parts_mut(&mut self) -> (&Schema, &mut [D::Buffer], &mut [usize], &mut [f32]) {
        (
            &self.schema,
            &mut self.columns,
            &mut self.positions,
            &mut self.weights,
        )
    }

    /// Sets the number of gathered rows.
    pub(crate) fn set_len(&mut self, rows: usize) {
        self.len = rows.min(self.room);
    }
}

/// A device that fails on request, shared by the tests of the buffers built on devices.
#[cfg(test)]
pub(crate) mod test_support {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{DeviceBackend, FakeBuffer, FakeDevice};
    use crate::error::{Error, Result};

    /// A [`FakeDevice`] whose uploads and gathers fail on request.
    #[derive(Clone, Debug)]
    pub(crate) struct FailingDevice {
        pub(crate) inner: FakeDevice,
        /// Uploads left before they fail (`usize::MAX`: never).
        pub(crate) uploads_left: Arc<AtomicUsize>,
        /// Gathers left before they fail.
        pub(crate) gathers_left: Arc<AtomicUsize>,
    }

    impl FailingDevice {
        pub(crate) fn new() -> Self {
            Self {
                inner: FakeDevice::new(),
                uploads_left: Arc::new(AtomicUsize::new(usize::MAX)),
                gathers_left: Arc::new(AtomicUsize::new(usize::MAX)),
            }
        }

        fn spend(counter: &AtomicUsize) -> Result<()> {
            match counter.load(Ordering::Relaxed) {
                0 => Err(Error::config("device", "failed on purpose")),
                usize::MAX => Ok(()),
                n => {
                    counter.store(n - 1, Ordering::Relaxed);
                    Ok(())
                }
            }
        }
    }

    impl DeviceBackend for FailingDevice {
        type Buffer = FakeBuffer;
        type Staging = Vec<u8>;

        fn device(&self) -> rl_core::Device {
            self.inner.device()
        }

        fn alloc(&self, bytes: usize) -> Result<FakeBuffer> {
            self.inner.alloc(bytes)
        }

        fn len(&self, buffer: &FakeBuffer) -> usize {
            self.inner.len(buffer)
        }

        fn alloc_staging(&self, bytes: usize) -> Result<Vec<u8>> {
            self.inner.alloc_staging(bytes)
        }

        fn staging_mut<'a>(&self, staging: &'a mut Vec<u8>) -> Result<&'a mut [u8]> {
            self.inner.staging_mut(staging)
        }

        fn upload(&self, src: &[u8], dst: &mut FakeBuffer, offset: usize) -> Result<()> {
            Self::spend(&self.uploads_left)?;
            self.inner.upload(src, dst, offset)
        }

        fn upload_staging(
            &self,
            staging: &Vec<u8>,
            len: usize,
            dst: &mut FakeBuffer,
            offset: usize,
        ) -> Result<()> {
            self.inner.upload_staging(staging, len, dst, offset)
        }

        fn download(&self, src: &FakeBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
            self.inner.download(src, offset, dst)
        }

        fn gather(
            &self,
            src: &FakeBuffer,
            row_bytes: usize,
            pairs: &FakeBuffer,
            rows: usize,
            dst: &mut FakeBuffer,
        ) -> Result<()> {
            Self::spend(&self.gathers_left)?;
            self.inner.gather(src, row_bytes, pairs, rows, dst)
        }

        fn synchronize(&self) -> Result<()> {
            self.inner.synchronize()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_device_copies_gathers_and_counts() {
        let device = FakeDevice::new();
        let mut column = device.alloc(4 * 8).unwrap();
        assert_eq!(device.allocated_bytes(), 32);
        let rows: Vec<u8> = (0..32).collect();
        device.upload(&rows, &mut column, 0).unwrap();
        let mut pairs = device.alloc(3 * 8).unwrap();
        let mut staging = device.alloc_staging(24).unwrap();
        let len = encode_pairs(
            [(3, 0), (1, 2), (3, 1)].into_iter(),
            device.staging_mut(&mut staging).unwrap(),
        )
        .unwrap();
        device.upload_staging(&staging, len, &mut pairs, 0).unwrap();
        let mut out = device.alloc(3 * 8).unwrap();
        device.gather(&column, 8, &pairs, 3, &mut out).unwrap();
        let mut host = [0u8; 24];
        device.download(&out, 0, &mut host).unwrap();
        assert_eq!(&host[..8], &rows[24..32]);
        assert_eq!(&host[8..16], &rows[24..32]);
        assert_eq!(&host[16..], &rows[8..16]);
        assert!(
            device.upload(&rows, &mut column, 1).is_err(),
            "past the end"
        );
        assert!(
            device.gather(&column, 16, &pairs, 3, &mut out).is_err(),
            "row 3 of 16 bytes is outside"
        );
        drop((column, pairs, out));
        assert_eq!(device.allocated_bytes(), 0);
    }
}
