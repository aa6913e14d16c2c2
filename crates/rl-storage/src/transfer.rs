//! Moving host batches to a device: the sample-time transform that makes the storage
//! location (RAM, memory-mapped file) and the device batches land on separate choices.

use rl_core::{DType, Location, MemoryBudget, MemoryPlan, Schema};

use crate::batch::Batch;
use crate::device::{DeviceBackend, DeviceBatch};
use crate::error::{Error, Result};

/// Moves host [`Batch`]es, sampled from any host storage (RAM, a memory-mapped file), to
/// a device, through reused staging memory: the usual way to train on a GPU from a replay
/// buffer larger than GPU memory.
///
/// Built once for a schema and a maximum number of rows, it owns a [`DeviceBatch`] and a
/// staging area big enough for a whole batch (page-locked on CUDA, so uploads run at full
/// bus speed), split into one staging buffer per column so that every column's upload
/// can be in flight at once. [`ToDevice::to_device`] copies each column of the host batch
/// into its staging buffer and uploads it with one copy, then copies the positions and
/// weights. Nothing is allocated after construction.
///
/// ```
/// use rl_core::{Column, DType, Field, Schema};
/// use rl_storage::{Batch, ColumnSlice, device::{FakeDevice, ToDevice}, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
///
/// let schema = Schema::new([
///     Column::new(Field::Obs.name(), DType::F32, &[2]),
///     Column::scalar(Field::Action.name(), DType::U32),
/// ])?;
/// let mut buffer = ReplayBuffer::new(RamStorage::new(schema.clone(), 100, None)?, Uniform::new(0));
/// buffer.extend(&[ColumnSlice::from(&[1.0f32, 2.0, 3.0, 4.0]), (&[7u32, 8]).into()])?;
///
/// let device = FakeDevice::new(); // or a CudaDevice
/// let mut batch = Batch::new(&schema, 32)?;
/// let mut to_device = ToDevice::new(device.clone(), &schema, 32, None)?;
/// buffer.sample(&mut batch)?;
/// let on_device = to_device.to_device(&batch)?;
/// let mut actions = [0u32; 32];
/// on_device.download(&device, Field::Action.name(), &mut actions)?;
/// assert_eq!(actions, batch.field::<u32>(Field::Action)?);
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Debug)]
pub struct ToDevice<D: DeviceBackend> {
    device: D,
    /// One staging buffer per column, `rows x row bytes` each.
    staging: Vec<D::Staging>,
    batch: DeviceBatch<D>,
    plan: MemoryPlan,
}

impl<D: DeviceBackend> ToDevice<D> {
    /// What a transfer of up to `rows` rows of `schema` allocates: the device batch (one
    /// [`Location::Gpu`] line per column), its host positions and weights, and the
    /// staging buffers ([`Location::Ram`], page-locked on CUDA: one line per column).
    ///
    /// # Errors
    /// Zero rows or overflow.
    pub fn plan(schema: &Schema, rows: usize) -> Result<MemoryPlan> {
        let mut plan = MemoryPlan::new();
        plan.nest("to_device", &DeviceBatch::<D>::plan(schema, rows)?);
        let overflow = || {
            Error::config(
                "batch rows",
                format!("{rows} rows overflow the address space"),
            )
        };
        let index_bytes = rows
            .checked_mul(size_of::<usize>() + size_of::<f32>())
            .ok_or_else(overflow)?;
        plan.add(
            "to_device/device_batch/positions+weights",
            Location::Ram,
            index_bytes as u64,
        );
        for column in schema.columns() {
            let bytes = column.row_bytes().checked_mul(rows).ok_or_else(overflow)?;
            plan.add(
                format!("to_device/staging/{}", column.name()),
                Location::Ram,
                bytes as u64,
            );
        }
        Ok(plan)
    }

    /// A transfer of up to `rows` rows of `schema` to `device`: allocates the device
    /// batch and the staging buffers, once, refusing first (before allocating anything)
    /// a configuration whose plan does not fit `budget`.
    ///
    /// # Errors
    /// As [`ToDevice::plan`], over budget (naming the plan's largest lines), out of
    /// (device or page-locked) memory, or a driver error.
    pub fn new(
        device: D,
        schema: &Schema,
        rows: usize,
        budget: Option<&MemoryBudget>,
    ) -> Result<Self> {
        let plan = Self::plan(schema, rows)?;
        if let Some(budget) = budget {
            plan.check(budget)?;
        }
        let batch = DeviceBatch::new(&device, schema, rows)?;
        let staging = schema
            .columns()
            .iter()
            .map(|column| device.alloc_staging(column.row_bytes() * rows))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            device,
            staging,
            batch,
            plan,
        })
    }

    /// The device batches land on.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device batch, as the last [`ToDevice::to_device`] left it.
    pub fn device_batch(&self) -> &DeviceBatch<D> {
        &self.batch
    }

    /// Maximum rows one transfer moves.
    pub fn room(&self) -> usize {
        self.batch.room()
    }

    /// What the transfer allocated, line by line.
    pub fn memory_plan(&self) -> MemoryPlan {
        self.plan.clone()
    }

    /// Copies the `batch.len()` rows of `batch` (every column, the positions and the
    /// weights) to the device batch and returns it. One upload per column, from reused
    /// staging memory; allocates nothing. The uploads may still be in flight when this
    /// returns (work queued after them on the device sees the data; host reads of the
    /// device batch wait for it).
    ///
    /// # Errors
    /// [`Error::BatchSchema`] for a batch of another schema, [`Error::NotEnoughRows`] for
    /// more rows than [`ToDevice::room`], or a driver error. On error the device batch
    /// holds no rows.
    pub fn to_device(&mut self, batch: &Batch) -> Result<&DeviceBatch<D>> {
        if batch.schema() != self.batch.schema() {
            return Err(Error::BatchSchema);
        }
        self.batch.set_len(0);
        let rows = batch.len();
        if rows > self.batch.room() {
            return Err(Error::NotEnoughRows {
                requested: rows,
                available: self.batch.room(),
            });
        }
        let (schema, targets, positions, weights) = self.batch.parts_mut();
        for (index, ((column, staging), target)) in schema
            .columns()
            .iter()
            .zip(&mut self.staging)
            .zip(targets)
            .enumerate()
        {
            let source = column_bytes(batch, index, column.dtype())?;
            if source.is_empty() {
                continue;
            }
            let room = self.device.staging_mut(staging)?;
            let room_bytes = room.len();
            room.get_mut(..source.len())
                .ok_or_else(|| {
                    Error::config(
                        "staging buffer",
                        format!(
                            "of {room_bytes} bytes cannot hold {} bytes of column `{}`",
                            source.len(),
                            column.name()
                        ),
                    )
                })?
                .copy_from_slice(source);
            self.device
                .upload_staging(staging, source.len(), target, 0)?;
        }
        positions[..rows].copy_from_slice(batch.positions());
        weights[..rows].copy_from_slice(batch.weights());
        self.batch.set_len(rows);
        Ok(&self.batch)
    }
}

/// The gathered rows of column `index` of `batch`, as bytes.
fn column_bytes(batch: &Batch, index: usize, dtype: DType) -> Result<&[u8]> {
    Ok(match dtype {
        DType::F32 => bytemuck::cast_slice(batch.column_at::<f32>(index)?),
        DType::U32 => bytemuck::cast_slice(batch.column_at::<u32>(index)?),
        DType::I64 => bytemuck::cast_slice(batch.column_at::<i64>(index)?),
        DType::U8 => batch.column_at::<u8>(index)?,
        DType::Bool => bytemuck::cast_slice(batch.column_at::<rl_core::Flag>(index)?),
    })
}

#[cfg(test)]
mod tests {
    use rl_core::{Column, Element, Field, Flag};
    use rl_testkit::measure;

    use super::*;
    use crate::column::ColumnSlice;
    use crate::device::FakeDevice;
    use crate::memmap::{MemmapOptions, MemmapStorage};
    use crate::prioritized::{Prioritized, PrioritizedConfig};
    use crate::ram::RamStorage;
    use crate::replay::ReplayBuffer;
    use crate::sampler::Uniform;
    use crate::storage::HostStorage;

    /// Every dtype, with scalar and multi-dimensional rows of odd sizes.
    fn schema() -> Schema {
        Schema::new([
            Column::new(Field::Obs.name(), DType::F32, &[2, 3]),
            Column::scalar(Field::Action.name(), DType::U32),
            Column::new("step", DType::I64, &[2]),
            Column::new("pixels", DType::U8, &[3, 1]),
            Column::scalar(Field::Reward.name(), DType::F32),
            Column::scalar(Field::Terminated.name(), DType::Bool),
        ])
        .unwrap()
    }

    struct Rows {
        obs: Vec<f32>,
        action: Vec<u32>,
        step: Vec<i64>,
        pixels: Vec<u8>,
        reward: Vec<f32>,
        terminated: Vec<Flag>,
    }

    impl Rows {
        fn new(ids: std::ops::Range<u32>) -> Self {
            let ids: Vec<u32> = ids.collect();
            Self {
                obs: ids
                    .iter()
                    .flat_map(|&i| (0..6).map(move |k| i as f32 + k as f32 / 8.0))
                    .collect(),
                action: ids.iter().map(|&i| i * 3 + 1).collect(),
                step: ids
                    .iter()
                    .flat_map(|&i| [i64::from(i) << 33, -i64::from(i)])
                    .collect(),
                pixels: ids
                    .iter()
                    .flat_map(|&i| [i as u8, 255 - i as u8, 7])
                    .collect(),
                reward: ids.iter().map(|&i| -(i as f32)).collect(),
                terminated: ids.iter().map(|&i| Flag::new(i % 3 == 0)).collect(),
            }
        }

        fn columns(&self) -> [ColumnSlice<'_>; 6] {
            [
                (&self.obs).into(),
                (&self.action).into(),
                (&self.step).into(),
                (&self.pixels).into(),
                (&self.reward).into(),
                (&self.terminated).into(),
            ]
        }
    }

    /// The device batch holds exactly the host batch: every column, positions, weights.
    fn assert_same(device: &FakeDevice, on_device: &DeviceBatch<FakeDevice>, host: &Batch) {
        fn same<T: Element>(
            device: &FakeDevice,
            on_device: &DeviceBatch<FakeDevice>,
            host: &Batch,
            name: &str,
        ) {
            let expected = host.column::<T>(name).unwrap();
            let mut out = vec![T::default(); expected.len()];
            on_device.download(device, name, &mut out).unwrap();
            assert_eq!(out, expected, "column {name}");
        }
        assert_eq!(on_device.len(), host.len());
        assert_eq!(on_device.positions(), host.positions());
        assert_eq!(on_device.weights(), host.weights());
        same::<f32>(device, on_device, host, Field::Obs.name());
        same::<u32>(device, on_device, host, Field::Action.name());
        same::<i64>(device, on_device, host, "step");
        same::<u8>(device, on_device, host, "pixels");
        same::<f32>(device, on_device, host, Field::Reward.name());
        same::<Flag>(device, on_device, host, Field::Terminated.name());
    }

    #[test]
    fn round_trips_every_dtype_positions_and_weights() {
        let capacity = 50;
        let sampler = Prioritized::new(capacity, PrioritizedConfig::default(), 5).unwrap();
        let mut buffer =
            ReplayBuffer::new(RamStorage::new(schema(), capacity, None).unwrap(), sampler);
        buffer.extend(&Rows::new(0..70).columns()).unwrap();
        let stored: Vec<usize> = buffer.positions().collect();
        let priorities: Vec<f32> = (0..stored.len()).map(|i| 0.1 + i as f32).collect();
        buffer
            .sampler_mut()
            .update_priorities(&stored, &priorities)
            .unwrap();
        let device = FakeDevice::new();
        let mut to_device = ToDevice::new(device.clone(), &schema(), 40, None).unwrap();
        let mut batch = Batch::new(&schema(), 40).unwrap();
        for rows in [40, 17, 1] {
            buffer.sample_rows(&mut batch, rows).unwrap();
            assert!(
                batch.weights().iter().any(|&w| w != 1.0),
                "weights worth checking"
            );
            let on_device = to_device.to_device(&batch).unwrap();
            assert_same(&device, on_device, &batch);
        }
        // Explicit positions, weights 1 again.
        buffer.gather(&[49, 5, 5, 33], &mut batch).unwrap();
        let on_device = to_device.to_device(&batch).unwrap();
        assert_same(&device, on_device, &batch);
        let mut action = [0u32; 4];
        on_device
            .download(&device, Field::Action.name(), &mut action)
            .unwrap();
        // Positions 0..20 hold rows 50..70 (the ring wrapped), 20..50 rows 20..50.
        assert_eq!(action, [49 * 3 + 1, 55 * 3 + 1, 55 * 3 + 1, 33 * 3 + 1]);
    }

    #[test]
    fn memmap_storage_to_a_device_allocates_nothing_per_batch() {
        let dir = tempfile::tempdir().unwrap();
        let storage = MemmapStorage::create(
            dir.path().join("replay"),
            schema(),
            300,
            MemmapOptions::default(),
        )
        .unwrap();
        let mut buffer = ReplayBuffer::new(storage, Uniform::new(9));
        let first = Rows::new(0..250);
        let second = Rows::new(250..400); // wraps
        buffer.extend(&first.columns()).unwrap();
        buffer.extend(&second.columns()).unwrap();
        assert_eq!(buffer.storage().column(1).len(), 300 * 4);
        let device = FakeDevice::new();
        let mut to_device = ToDevice::new(device.clone(), &schema(), 64, None).unwrap();
        let mut batch = Batch::new(&schema(), 64).unwrap();
        buffer.sample(&mut batch).unwrap();
        let on_device = to_device.to_device(&batch).unwrap();
        assert_same(&device, on_device, &batch);
        assert!(
            batch
                .column::<u32>(Field::Action.name())
                .unwrap()
                .iter()
                .all(|&a| (a - 1) / 3 >= 100),
            "only the newest 300 rows are stored"
        );

        let more = Rows::new(400..410);
        let (result, stats) = measure(|| -> Result<()> {
            for _ in 0..50 {
                buffer.extend(&more.columns())?;
                buffer.sample(&mut batch)?;
                to_device.to_device(&batch)?;
            }
            Ok(())
        });
        result.unwrap();
        assert_eq!(stats.allocations, 0, "{stats:?}");
        assert_same(&device, to_device.device_batch(), &batch);
    }

    #[test]
    fn foreign_and_oversized_batches_are_refused() {
        let device = FakeDevice::new();
        let mut to_device = ToDevice::new(device.clone(), &schema(), 4, None).unwrap();
        let mut buffer = ReplayBuffer::new(
            RamStorage::new(schema(), 10, None).unwrap(),
            Uniform::new(0),
        );
        buffer.extend(&Rows::new(0..10).columns()).unwrap();
        let mut small = Batch::new(&schema(), 4).unwrap();
        buffer.sample(&mut small).unwrap();
        to_device.to_device(&small).unwrap();
        assert_eq!(to_device.device_batch().len(), 4);
        let mut big = Batch::new(&schema(), 5).unwrap();
        buffer.sample(&mut big).unwrap();
        assert!(matches!(
            to_device.to_device(&big),
            Err(Error::NotEnoughRows {
                requested: 5,
                available: 4
            })
        ));
        assert!(to_device.device_batch().is_empty());
        let other = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
        let foreign = Batch::new(&other, 2).unwrap();
        assert!(matches!(
            to_device.to_device(&foreign),
            Err(Error::BatchSchema)
        ));
        // A batch that was never sampled moves zero rows.
        let empty = Batch::new(&schema(), 4).unwrap();
        assert!(to_device.to_device(&empty).unwrap().is_empty());
        assert!(ToDevice::new(device, &schema(), 0, None).is_err());
    }

    #[test]
    fn plan_matches_what_is_allocated_and_budgets_are_checked_first() {
        let device = FakeDevice::new();
        let plan = ToDevice::<FakeDevice>::plan(&schema(), 128).unwrap();
        let row_bytes = schema().row_bytes() as u64;
        assert_eq!(plan.total(Location::Gpu), 128 * row_bytes);
        assert_eq!(plan.total(Location::Ram), 128 * row_bytes + 128 * 12);
        let to_device = ToDevice::new(device.clone(), &schema(), 128, None).unwrap();
        assert_eq!(device.allocated_bytes(), plan.total(Location::Gpu));
        assert_eq!(to_device.memory_plan(), plan);
        assert_eq!(to_device.room(), 128);
        assert_eq!(
            to_device.device().allocated_bytes(),
            device.allocated_bytes()
        );
        drop(to_device);
        let budget = MemoryBudget::unlimited().with_gpu(128 * row_bytes - 1);
        let err = ToDevice::new(device.clone(), &schema(), 128, Some(&budget)).unwrap_err();
        assert!(
            err.to_string().contains("to_device/device_batch/obs"),
            "{err}"
        );
        assert_eq!(device.allocated_bytes(), 0, "nothing allocated");
        let ram = MemoryBudget::ram(plan.total(Location::Ram) - 1);
        let err = ToDevice::new(device.clone(), &schema(), 128, Some(&ram)).unwrap_err();
        assert!(err.to_string().contains("to_device/staging/obs"), "{err}");
    }
}
