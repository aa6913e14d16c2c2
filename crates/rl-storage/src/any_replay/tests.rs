use rl_core::{Column, DType, Field, Flag};

use super::*;
use crate::dedup::NEXT_OBS;
use crate::memmap::MemmapOptions;
use crate::replay::with_storage;
use crate::sampler::{Prioritized, PrioritizedConfig, SliceSampler, Uniform};

const CAPACITY: usize = 20;

fn schema() -> Schema {
    Schema::new([
        Column::new(Field::Obs.name(), DType::F32, &[2]),
        Column::scalar("id", DType::I64),
        Column::scalar(Field::Terminated.name(), DType::Bool),
        Column::scalar(Field::Truncated.name(), DType::Bool),
    ])
    .unwrap()
}

fn samplers(seed: u64) -> [AnySampler; 3] {
    [
        Uniform::new(seed).into(),
        Prioritized::new(CAPACITY, PrioritizedConfig::default(), seed)
            .unwrap()
            .into(),
        SliceSampler::new(3, seed).unwrap().into(),
    ]
}

/// The same buffer in RAM and in a memmap file in `dir`.
fn both(dir: &Path, sampler: &AnySampler) -> [AnyReplay; 2] {
    let ram = RamStorage::new(schema(), CAPACITY, None).unwrap();
    let file = MemmapStorage::create(
        dir.join("replay.rlmm"),
        schema(),
        CAPACITY,
        MemmapOptions::default(),
    )
    .unwrap();
    [
        AnyReplay::Ram(ReplayBuffer::new(ram, sampler.clone())),
        AnyReplay::Memmap(ReplayBuffer::new(file, sampler.clone())),
    ]
}

/// Writes rows `ids` (an episode ends every 7 rows).
fn write(buffer: &mut AnyReplay, ids: std::ops::Range<i64>) {
    let obs: Vec<f32> = ids.clone().flat_map(|i| [i as f32, -(i as f32)]).collect();
    let id: Vec<i64> = ids.clone().collect();
    let terminated: Vec<Flag> = ids.clone().map(|i| Flag::new(i % 7 == 6)).collect();
    let truncated = vec![Flag::new(false); id.len()];
    let rows = buffer
        .extend(&[
            ColumnSlice::from(&obs),
            (&id).into(),
            (&terminated).into(),
            (&truncated).into(),
        ])
        .unwrap();
    assert_eq!(rows, id.len());
}

/// Positions, weights and gathered rows of a batch of 6.
fn draw(buffer: &mut AnyReplay) -> (Vec<usize>, Vec<f32>, Vec<f32>, Vec<i64>) {
    let mut batch = Batch::new(&schema(), 6).unwrap();
    buffer.sample(&mut batch).unwrap();
    (
        batch.positions().to_vec(),
        batch.weights().to_vec(),
        batch.column::<f32>(Field::Obs.name()).unwrap().to_vec(),
        batch.column::<i64>("id").unwrap().to_vec(),
    )
}

/// A buffer over RAM and one over a memmap file, fed the same rows (wrapping the ring),
/// sample the same rows with every sampler.
#[test]
fn ram_and_memmap_sample_the_same_rows() {
    for sampler in samplers(11) {
        let dir = tempfile::tempdir().unwrap();
        let [mut ram, mut file] = both(dir.path(), &sampler);
        assert_eq!(
            (ram.location(), file.location()),
            (Location::Ram, Location::File)
        );
        assert_eq!(ram.path(), None);
        assert_eq!(file.path(), Some(dir.path().join("replay.rlmm").as_path()));
        for round in 0..4 {
            write(&mut ram, round * 9..round * 9 + 9);
            write(&mut file, round * 9..round * 9 + 9);
            assert_eq!(ram.ring(), file.ring());
            let (from_ram, from_file) = (draw(&mut ram), draw(&mut file));
            assert_eq!(from_ram, from_file, "{sampler:?}");
            // The rows are the stored ones: obs and id agree.
            for (j, &id) in from_ram.3.iter().enumerate() {
                assert_eq!(from_ram.2[2 * j], id as f32);
                assert!(id >= ram.ring().written as i64 - CAPACITY as i64, "{id}");
            }
            if let Some(p) = ram.sampler_mut().as_prioritized_mut() {
                let priorities: Vec<f32> = from_ram.3.iter().map(|&i| (i % 5) as f32).collect();
                p.update_priorities(&from_ram.0, &priorities).unwrap();
                file.sampler_mut()
                    .as_prioritized_mut()
                    .unwrap()
                    .update_priorities(&from_file.0, &priorities)
                    .unwrap();
            }
        }
        assert_eq!((ram.len(), ram.capacity()), (CAPACITY, CAPACITY));
        assert_eq!((file.len(), file.capacity()), (CAPACITY, CAPACITY));
        assert_eq!(ram.schema(), file.schema());
        assert_eq!(
            ram.column::<i64>("id").unwrap(),
            file.column::<i64>("id").unwrap()
        );
        assert_eq!(ram.sampler().state_format(), file.sampler().state_format());
        ram.commit().unwrap();
        file.commit().unwrap();
    }
}

/// The enum's plan is the buffer inside's: storage lines where the rows live, then the
/// sampler's.
#[test]
fn memory_plans_are_the_buffers_own() {
    let dir = tempfile::tempdir().unwrap();
    let [ram, file] = both(dir.path(), &samplers(0)[1]);
    let ram_plan = with_storage!(&ram, b => b.memory_plan());
    assert_eq!(ram.memory_plan(), ram_plan);
    assert_eq!(
        ram_plan.total(Location::Ram),
        RamStorage::plan(&schema(), CAPACITY)
            .unwrap()
            .total(Location::Ram)
            + ram.sampler().memory_plan().total(Location::Ram)
    );
    assert_eq!(
        file.memory_plan().total(Location::File),
        MemmapStorage::plan(&schema(), CAPACITY)
            .unwrap()
            .total(Location::File)
    );
    assert_eq!(
        file.memory_plan().total(Location::Ram),
        ram.sampler().memory_plan().total(Location::Ram)
    );
}

/// `with_storage!` binds the buffer inside, mutably or not, and runs generic code on it.
#[test]
fn with_storage_reaches_the_buffer_inside() {
    fn oldest<S: crate::storage::HostStorage, P: Sampler>(b: &ReplayBuffer<S, P>) -> usize {
        b.positions().next().unwrap()
    }
    let dir = tempfile::tempdir().unwrap();
    for mut buffer in both(dir.path(), &samplers(0)[0]) {
        let (obs, id, flags) = (
            [0.0f32; 50],
            (0..25).collect::<Vec<i64>>(),
            [Flag::new(false); 25],
        );
        let columns = [
            (&obs).into(),
            (&id).into(),
            (&flags).into(),
            (&flags).into(),
        ];
        let rows = with_storage!(&mut buffer, b => b.extend(&columns)).unwrap();
        assert_eq!(rows, 25);
        // 25 rows in a ring of 20: the oldest is the sixth written, at position 5.
        assert_eq!(with_storage!(&buffer, b => oldest(b)), 5);
    }
}

fn dedup_columns() -> Vec<Column> {
    vec![
        Column::new(Field::Obs.name(), DType::F32, &[2]),
        Column::scalar(Field::Action.name(), DType::U32),
        Column::scalar(Field::Terminated.name(), DType::Bool),
        Column::scalar(Field::Truncated.name(), DType::Bool),
    ]
}

/// A deduplicating buffer over RAM and one over a memmap file, fed the same steps, store
/// and sample the same transitions.
#[test]
fn dedup_over_ram_and_memmap_sample_the_same_transitions() {
    let dir = tempfile::tempdir().unwrap();
    let schema = DedupReplay::<RamStorage>::schema(dedup_columns()).unwrap();
    let ram = RamStorage::new(schema.clone(), CAPACITY, None).unwrap();
    let file = MemmapStorage::create(
        dir.path().join("dedup.rlmm"),
        schema.clone(),
        CAPACITY,
        MemmapOptions::default(),
    )
    .unwrap();
    let mut buffers: [AnyDedup; 2] = [
        AnyDedup::Ram(DedupReplay::new(ram, Uniform::new(4).into()).unwrap()),
        AnyDedup::Memmap(DedupReplay::new(file, Uniform::new(4).into()).unwrap()),
    ];
    for buffer in &mut buffers {
        assert!(buffer.is_empty());
        for t in 0..30u32 {
            let last = t % 6 == 5;
            let o = [t as f32, 0.5];
            let final_obs = [t as f32 + 1.0, 0.5];
            let (action, terminated, truncated) = ([t], [Flag::new(last)], [Flag::new(false)]);
            let row = [
                (&o).into(),
                (&action).into(),
                (&terminated).into(),
                (&truncated).into(),
            ];
            buffer
                .push_step(&row, last.then(|| (&final_obs).into()))
                .unwrap();
        }
        buffer.commit().unwrap();
    }
    let [ram, file] = &mut buffers;
    assert_eq!(
        (ram.location(), file.location()),
        (Location::Ram, Location::File)
    );
    assert_eq!(ram.schema(), &schema);
    assert_eq!(ram.batch_schema(), file.batch_schema());
    assert_eq!(
        (ram.len(), ram.capacity(), ram.ring()),
        (file.len(), file.capacity(), file.ring())
    );
    assert_eq!(ram.ring().episodes, 5);
    let mut batch = Batch::new(ram.batch_schema(), 8).unwrap();
    for _ in 0..3 {
        ram.sample(&mut batch).unwrap();
        let from_ram = (
            batch.positions().to_vec(),
            batch.column::<f32>(NEXT_OBS).unwrap().to_vec(),
        );
        file.sample(&mut batch).unwrap();
        let from_file = (
            batch.positions().to_vec(),
            batch.column::<f32>(NEXT_OBS).unwrap().to_vec(),
        );
        assert_eq!(from_ram, from_file);
        let obs = batch.column::<f32>(Field::Obs.name()).unwrap();
        for (j, next) in from_file.1.chunks(2).enumerate() {
            assert_eq!(next[0], obs[2 * j] + 1.0);
        }
    }
    assert_eq!(ram.memory_plan().total(Location::File), 0);
    assert_eq!(
        file.memory_plan().total(Location::File),
        MemmapStorage::plan(&schema, CAPACITY)
            .unwrap()
            .total(Location::File)
    );
}
