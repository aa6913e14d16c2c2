use proptest::prelude::*;
use rl_core::{Column, DType, Flag};

use super::*;
use crate::sampler_state::SAMPLER_FILE;
use crate::{
    Batch, ColumnSlice,
    sampler::{
        LastBatch, Prioritized, PrioritizedConfig, SampleContext, SliceSampler, Uniform,
        WithoutReplacement,
    },
};

fn schema() -> Schema {
    Schema::new([
        Column::new("obs", DType::U8, &[5]),
        Column::scalar("id", DType::I64),
        Column::scalar("terminated", DType::Bool),
    ])
    .unwrap()
}

fn write<P: Sampler>(buffer: &mut ReplayBuffer<RamStorage, P>, ids: std::ops::Range<i64>) {
    let obs: Vec<u8> = ids.clone().flat_map(|i| [i as u8; 5]).collect();
    let id: Vec<i64> = ids.clone().collect();
    let done: Vec<Flag> = ids.map(|i| Flag::new(i % 4 == 3)).collect();
    buffer
        .extend(&[ColumnSlice::from(&obs), (&id).into(), (&done).into()])
        .unwrap();
}

fn ids(buffer: &ReplayBuffer) -> Vec<i64> {
    let id = buffer.column::<i64>("id").unwrap();
    let obs = buffer.column::<u8>("obs").unwrap();
    buffer
        .positions()
        .map(|p| {
            assert_eq!(obs[p * 5..p * 5 + 5], [id[p] as u8; 5]);
            id[p]
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Loading a checkpoint returns exactly the rows and counters that were saved.
    #[test]
    fn save_then_load_round_trips(capacity in 1usize..30, rows in 0i64..80) {
        let dir = tempfile::tempdir().unwrap();
        let mut buffer = ReplayBuffer::new(RamStorage::new(schema(), capacity, None).unwrap(), Uniform::new(0));
        write(&mut buffer, 0..rows);
        buffer.save(dir.path()).unwrap();
        let loaded: ReplayBuffer = ReplayBuffer::load(dir.path(), Uniform::new(0)).unwrap();
        prop_assert_eq!(ids(&loaded), ids(&buffer));
        prop_assert_eq!(loaded.ring().written, buffer.ring().written);
        prop_assert_eq!(loaded.ring().episodes, buffer.ring().episodes);
        // The loaded buffer keeps going like the original.
        let mut loaded = loaded;
        write(&mut loaded, rows..rows + 7);
        write(&mut buffer, rows..rows + 7);
        prop_assert_eq!(ids(&loaded), ids(&buffer));
    }
}

#[test]
fn damaged_checkpoints_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut buffer = ReplayBuffer::new(
        RamStorage::new(schema(), 10, None).unwrap(),
        Uniform::new(0),
    );
    write(&mut buffer, 0..6);
    buffer.save(dir.path()).unwrap();
    let column = column_file(dir.path(), 1);
    let full = std::fs::read(&column).unwrap();
    std::fs::write(&column, &full[..full.len() - 3]).unwrap();
    let err = ReplayBuffer::<RamStorage, Uniform>::load(dir.path(), Uniform::new(0)).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err}");
    std::fs::write(&column, &full).unwrap();
    let meta = dir.path().join(META);
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, text.replace("\"version\": 1", "\"version\": 99")).unwrap();
    let err = ReplayBuffer::<RamStorage, Uniform>::load(dir.path(), Uniform::new(0)).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedVersion { found: 99, .. }),
        "{err}"
    );
    std::fs::write(&meta, "{ not json").unwrap();
    let err = ReplayBuffer::<RamStorage, Uniform>::load(dir.path(), Uniform::new(0)).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    let missing =
        ReplayBuffer::<RamStorage, Uniform>::load(&dir.path().join("nope"), Uniform::new(0));
    assert!(matches!(missing, Err(Error::Io { .. })));
}

#[test]
fn saving_and_loading_make_no_second_copy() {
    let dir = tempfile::tempdir().unwrap();
    let mut buffer = ReplayBuffer::new(
        RamStorage::new(schema(), 200_000, None).unwrap(),
        Uniform::new(0),
    );
    write(&mut buffer, 0..200_000);
    let data_bytes = 200_000 * schema().row_bytes();
    let (saved, stats) = rl_testkit::measure(|| buffer.save(dir.path()));
    saved.unwrap();
    assert!(
        stats.peak_live_bytes < (data_bytes / 20) as i64,
        "save: {stats:?} for {data_bytes} bytes"
    );
    let (loaded, stats) = rl_testkit::measure(|| {
        ReplayBuffer::<RamStorage, Uniform>::load(dir.path(), Uniform::new(0))
    });
    assert_eq!(loaded.unwrap().len(), 200_000);
    assert!(
        stats.peak_live_bytes < (data_bytes / 20) as i64,
        "load: {stats:?} for {data_bytes} bytes"
    );
}

/// One step of a run: write `rows` rows, then (once the buffer holds rows) sample a batch
/// of `batch` rows.
type Step = (i64, usize);

fn steps(max_rows: i64) -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec((0..max_rows, 1usize..12), 1..10)
}

/// What a sample gave: positions, weight bits and row ids, or the error's message.
type Drawn = Result<(Vec<usize>, Vec<u32>, Vec<i64>), String>;

/// A buffer, the rows written so far, and what the sampler needs after each batch.
struct Run<P: Sampler> {
    buffer: ReplayBuffer<RamStorage, P>,
    next: i64,
    /// Called with the batch just drawn (priorities, for prioritized samplers).
    feedback: fn(&mut P, &Batch),
}

impl<P: Sampler> Run<P> {
    fn step(&mut self, (rows, batch_rows): Step) -> Drawn {
        write(&mut self.buffer, self.next..self.next + rows);
        self.next += rows;
        let mut batch = Batch::new(&schema(), batch_rows).unwrap();
        match self.buffer.sample(&mut batch) {
            Ok(()) => {
                (self.feedback)(self.buffer.sampler_mut(), &batch);
                Ok((
                    batch.positions().to_vec(),
                    batch.weights().iter().map(|w| w.to_bits()).collect(),
                    batch.column::<i64>("id").unwrap().to_vec(),
                ))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Priorities from the rows' ids and the batch: varied, reproducible, zero included.
fn prioritize(sampler: &mut Prioritized, batch: &Batch) {
    let ids = batch.column::<i64>("id").unwrap();
    let priorities: Vec<f32> = ids
        .iter()
        .enumerate()
        .map(|(j, &id)| ((id * 7 + j as i64) % 5) as f32 * 0.75)
        .collect();
    sampler
        .update_priorities(batch.positions(), &priorities)
        .unwrap();
}

fn no_feedback<P>(_: &mut P, _: &Batch) {}

/// Runs `before`, saves, loads into a buffer whose sampler has another seed, then runs
/// `after` on both the original and the loaded buffer: every batch must be the same.
fn resumes_exactly<P: Sampler>(
    capacity: usize,
    sampler: impl Fn(u64) -> P,
    feedback: fn(&mut P, &Batch),
    before: &[Step],
    after: &[Step],
) -> std::result::Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let storage = RamStorage::new(schema(), capacity, None).unwrap();
    let mut original = Run {
        buffer: ReplayBuffer::new(storage, sampler(1)),
        next: 0,
        feedback,
    };
    for &step in before {
        let _ = original.step(step);
    }
    original.buffer.save(dir.path()).unwrap();
    let mut loaded = Run {
        buffer: ReplayBuffer::load(dir.path(), sampler(2)).unwrap(),
        next: original.next,
        feedback,
    };
    prop_assert_eq!(loaded.buffer.ring(), original.buffer.ring());
    prop_assert!(loaded.buffer.positions().eq(original.buffer.positions()));
    for &step in after {
        prop_assert_eq!(loaded.step(step), original.step(step));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// A uniform sampler's generator is saved: the loaded buffer draws what the original
    /// draws next.
    #[test]
    fn uniform_sampling_resumes_exactly(capacity in 1usize..40, before in steps(30), after in steps(30)) {
        resumes_exactly(capacity, Uniform::new, no_feedback, &before, &after)?;
    }

    /// Priorities, the largest priority, beta and the generator are saved: the same
    /// positions and the same weights, bit for bit, with priorities updated after every
    /// batch on both sides.
    #[test]
    fn prioritized_sampling_resumes_exactly(
        capacity in 1usize..40,
        before in steps(30),
        after in steps(30),
        alpha in 0.0f64..1.5,
        beta in 0.0f64..=1.0,
    ) {
        let config = PrioritizedConfig { alpha, beta, ..PrioritizedConfig::default() };
        let sampler = |seed| {
            let mut sampler = Prioritized::new(capacity, config, seed).unwrap();
            // The loaded sampler is built with the default beta: the saved one wins.
            if seed == 2 {
                sampler.set_beta(PrioritizedConfig::default().beta).unwrap();
            }
            sampler
        };
        resumes_exactly(capacity, sampler, prioritize, &before, &after)?;
    }

    /// An epoch in progress is saved: the loaded buffer finishes it, then shuffles the
    /// same next epochs.
    #[test]
    fn sampling_without_replacement_resumes_exactly(
        capacity in 1usize..40,
        before in steps(30),
        after in steps(30),
        last in prop_oneof![Just(LastBatch::Keep), Just(LastBatch::Merge), Just(LastBatch::Drop)],
    ) {
        let sampler = |seed| WithoutReplacement::new(capacity, last, seed).unwrap();
        resumes_exactly(capacity, sampler, no_feedback, &before, &after)?;
    }

    /// Windows inside episodes: the generator is saved.
    #[test]
    fn slice_sampling_resumes_exactly(capacity in 1usize..40, before in steps(30), after in steps(30)) {
        let sampler = |seed| SliceSampler::new(2, seed).unwrap();
        resumes_exactly(capacity, sampler, no_feedback, &before, &after)?;
    }
}

/// A sampler that saves no state (the trait's defaults).
#[derive(Debug)]
struct Stateless(Uniform);

impl Sampler for Stateless {
    fn sample(
        &mut self,
        context: &SampleContext<'_>,
        rows: usize,
        indices: &mut [usize],
        weights: &mut [f32],
    ) -> Result<usize> {
        self.0.sample(context, rows, indices, weights)
    }
}

/// A buffer of 10 rows holding rows 0..13 (wrapped), saved to `dir`.
fn saved<P: Sampler>(dir: &Path, sampler: P) -> ReplayBuffer<RamStorage, P> {
    let mut buffer = ReplayBuffer::new(RamStorage::new(schema(), 10, None).unwrap(), sampler);
    write(&mut buffer, 0..13);
    buffer.save(dir).unwrap();
    buffer
}

/// The first `n` positions the buffer draws, one row at a time.
fn draws<P: Sampler>(buffer: &mut ReplayBuffer<RamStorage, P>, n: usize) -> Vec<usize> {
    let mut batch = Batch::new(&schema(), 1).unwrap();
    (0..n)
        .map(|_| {
            buffer.sample(&mut batch).unwrap();
            batch.positions()[0]
        })
        .collect()
}

/// Turns the checkpoint in `dir` into one of the format before samplers saved state.
fn make_old_format(dir: &Path) {
    let meta = dir.join(META);
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("sampler").unwrap();
    std::fs::write(&meta, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
    std::fs::remove_file(dir.join(SAMPLER_FILE)).unwrap();
}

#[test]
fn checkpoints_without_sampler_state_load_with_the_sampler_as_constructed() {
    let dir = tempfile::tempdir().unwrap();
    let mut original = saved(dir.path(), Uniform::new(1));
    make_old_format(dir.path());
    let mut old: ReplayBuffer = ReplayBuffer::load(dir.path(), Uniform::new(2)).unwrap();
    assert_eq!(ids(&old), ids(&original));
    assert_eq!(old.ring(), original.ring());
    // Draws follow the new seed: the comparison of the property tests sees it.
    let expected = {
        let mut fresh = saved(tempfile::tempdir().unwrap().path(), Uniform::new(2));
        draws(&mut fresh, 20)
    };
    assert_eq!(draws(&mut old, 20), expected);
    assert_ne!(expected, draws(&mut original, 20));

    // A prioritized sampler is told about the rows: each gets the initial priority.
    let sampler = Prioritized::new(10, PrioritizedConfig::default(), 0).unwrap();
    let old = ReplayBuffer::load(dir.path(), sampler).unwrap();
    for position in old.positions() {
        assert_eq!(old.sampler().priority(position), Some(1.0));
    }
    assert_eq!(old.sampler().total_priority(), 10.0);

    // So does a checkpoint of a sampler that saves no state; saving it removed the
    // earlier checkpoint's sampler file.
    let dir = tempfile::tempdir().unwrap();
    saved(dir.path(), Uniform::new(1));
    assert!(dir.path().join(SAMPLER_FILE).exists());
    saved(dir.path(), Stateless(Uniform::new(1)));
    assert!(!dir.path().join(SAMPLER_FILE).exists());
    let text = std::fs::read_to_string(dir.path().join(META)).unwrap();
    assert!(text.contains("\"sampler\": null"), "{text}");
    let loaded = ReplayBuffer::load(
        dir.path(),
        Prioritized::new(10, PrioritizedConfig::default(), 0).unwrap(),
    )
    .unwrap();
    assert_eq!(loaded.sampler().total_priority(), 10.0);
}

/// The two sides of a refused load's [`Error::SamplerMismatch`].
fn mismatch<P: Sampler>(result: Result<ReplayBuffer<RamStorage, P>>) -> String {
    match result.err() {
        Some(Error::SamplerMismatch {
            expected, found, ..
        }) => format!("{expected} / {found}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_state_of_another_sampler_or_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    saved(dir.path(), Uniform::new(1));
    let prioritized = Prioritized::new(10, PrioritizedConfig::default(), 0).unwrap();
    let message = mismatch(ReplayBuffer::load(dir.path(), prioritized));
    assert!(
        message.contains("`prioritized`") && message.contains("`uniform`"),
        "{message}"
    );
    let message = mismatch(ReplayBuffer::load(dir.path(), Stateless(Uniform::new(0))));
    assert!(message.contains("saves no state"), "{message}");

    saved(
        dir.path(),
        Prioritized::new(10, PrioritizedConfig::default(), 0).unwrap(),
    );
    let other = Prioritized::new(12, PrioritizedConfig::default(), 0).unwrap();
    let message = mismatch(ReplayBuffer::load(dir.path(), other));
    assert!(
        message.contains("12 rows") && message.contains("10 rows"),
        "{message}"
    );

    saved(dir.path(), SliceSampler::new(2, 0).unwrap());
    let message = mismatch(ReplayBuffer::load(
        dir.path(),
        SliceSampler::new(3, 0).unwrap(),
    ));
    assert!(
        message.contains("3-row") && message.contains("2-row"),
        "{message}"
    );

    saved(
        dir.path(),
        WithoutReplacement::new(10, LastBatch::Keep, 0).unwrap(),
    );
    let other = WithoutReplacement::new(10, LastBatch::Drop, 0).unwrap();
    let message = mismatch(ReplayBuffer::load(dir.path(), other));
    assert!(
        message.contains("Drop") && message.contains("Keep"),
        "{message}"
    );
    let other = WithoutReplacement::new(11, LastBatch::Keep, 0).unwrap();
    let message = mismatch(ReplayBuffer::load(dir.path(), other));
    assert!(message.contains("11 rows"), "{message}");
}

#[test]
fn damaged_sampler_files_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    saved(
        dir.path(),
        Prioritized::new(10, PrioritizedConfig::default(), 0).unwrap(),
    );
    let path = dir.path().join(SAMPLER_FILE);
    let good = std::fs::read(&path).unwrap();
    let load = || {
        let sampler = Prioritized::new(10, PrioritizedConfig::default(), 0).unwrap();
        ReplayBuffer::load(dir.path(), sampler).map(|_| ())
    };
    let damaged = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        load().unwrap_err()
    };
    // Cut short: in the payload, and inside the header.
    let err = damaged(&good[..good.len() - 5]);
    assert!(
        matches!(err, Error::Truncated { expected, actual, .. } if expected == good.len() as u64 && actual + 5 == expected),
        "{err}"
    );
    assert!(matches!(damaged(&good[..20]), Error::Truncated { .. }));
    // One bit flipped in the payload (the last priority).
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 1;
    let err = damaged(&flipped);
    assert!(
        matches!(&err, Error::Corrupt { reason, .. } if reason.contains("checksum")),
        "{err}"
    );
    // Bytes appended.
    let mut longer = good.clone();
    longer.push(0);
    assert!(matches!(damaged(&longer), Error::Corrupt { .. }));
    // Another file altogether.
    let mut foreign = good.clone();
    foreign[..8].copy_from_slice(b"NOTMAGIC");
    assert!(matches!(damaged(&foreign), Error::BadMagic { .. }));
    // A newer file format, and a newer layout of the sampler's state.
    let mut newer = good.clone();
    newer[8] = 2;
    assert!(matches!(
        damaged(&newer),
        Error::UnsupportedVersion {
            found: 2,
            supported: 1,
            ..
        }
    ));
    let mut newer = good.clone();
    newer[12] = 7;
    assert!(matches!(
        damaged(&newer),
        Error::UnsupportedVersion {
            found: 7,
            supported: 1,
            ..
        }
    ));
    // The metadata names another sampler than the file.
    std::fs::write(&path, &good).unwrap();
    let meta = dir.path().join(META);
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, text.replace("\"prioritized\"", "\"uniform\"")).unwrap();
    let err = ReplayBuffer::load(dir.path(), Uniform::new(0))
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { reason, .. } if reason.contains("metadata")),
        "{err}"
    );
    std::fs::write(&meta, text).unwrap();
    // Missing.
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(load(), Err(Error::Io { .. })));
    // Whole again, it loads.
    std::fs::write(&path, &good).unwrap();
    load().unwrap();
}

#[test]
fn saving_and_loading_priorities_make_no_second_copy() {
    let dir = tempfile::tempdir().unwrap();
    let capacity = 200_000;
    let sampler = || Prioritized::new(capacity, PrioritizedConfig::default(), 0).unwrap();
    let mut buffer = ReplayBuffer::new(
        RamStorage::new(schema(), capacity, None).unwrap(),
        sampler(),
    );
    write(&mut buffer, 0..capacity as i64);
    let positions: Vec<usize> = (0..capacity).step_by(3).collect();
    let priorities: Vec<f32> = positions.iter().map(|&p| p as f32).collect();
    buffer
        .sampler_mut()
        .update_priorities(&positions, &priorities)
        .unwrap();
    // The two trees: 2 x 2 x 2^18 f64s (8 MiB); the file holds one f64 per row.
    let trees = buffer.sampler().memory_plan().grand_total() as i64;
    let (saved, stats) = rl_testkit::measure(|| buffer.save(dir.path()));
    saved.unwrap();
    assert!(stats.peak_live_bytes < trees / 100, "save: {stats:?}");
    let fresh = sampler();
    let (loaded, stats) = rl_testkit::measure(|| ReplayBuffer::load(dir.path(), fresh));
    let loaded = loaded.unwrap();
    assert!(stats.peak_live_bytes < trees / 100, "load: {stats:?}");
    for position in [0, 1, 3, 199_998] {
        assert_eq!(
            loaded.sampler().priority(position),
            buffer.sampler().priority(position)
        );
    }
    assert_eq!(
        loaded.sampler().total_priority().to_bits(),
        buffer.sampler().total_priority().to_bits()
    );
}

/// Damage to one file of a checkpoint directory.
#[derive(Clone, Debug)]
enum Damage {
    /// Set the byte at (position modulo the length) to a value.
    Set(usize, u8),
    /// Keep only the first (position modulo the length + 1) bytes.
    Truncate(usize),
    /// Append bytes.
    Append(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        8 => (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Damage::Set(at, value)),
        1 => any::<usize>().prop_map(Damage::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..64).prop_map(Damage::Append),
    ]
}

fn apply(path: &Path, damages: &[Damage]) {
    let mut bytes = std::fs::read(path).unwrap();
    for damage in damages {
        match damage {
            Damage::Set(at, value) if !bytes.is_empty() => {
                let at = at % bytes.len();
                bytes[at] = *value;
            }
            Damage::Set(..) => {}
            Damage::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
            Damage::Append(tail) => bytes.extend(tail),
        }
    }
    std::fs::write(path, bytes).unwrap();
}

/// Loads the checkpoint in `dir` with `sampler` and, when it loads, uses it: samples a
/// batch and writes more rows. A typed error or a working buffer, never a panic.
fn load_and_use<P: Sampler>(dir: &Path, sampler: P) {
    let Ok(mut loaded) = ReplayBuffer::<RamStorage, P>::load(dir, sampler) else {
        return;
    };
    let mut batch = Batch::new(&schema(), 4).unwrap();
    if !loaded.is_empty() {
        // A sampler may refuse (an epoch it cannot continue): with a typed error.
        let _ = loaded.sample(&mut batch);
        assert!(batch.positions().iter().all(|&p| p < loaded.capacity()));
    }
    write(&mut loaded, 100..103);
    let _ = loaded.sample(&mut batch);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `sampler.bin` and `meta.json` damaged at random (bytes set, cut, appended) or
    /// replaced by random bytes, for samplers with state of every size: loading never
    /// panics and gives a typed error or a buffer that samples and writes.
    #[test]
    fn damaged_sampler_state_and_metadata_never_panic(
        which in 0usize..4,
        target in 0usize..3,
        damages in proptest::collection::vec(damage(), 1..6),
        random in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let capacity = 10;
        let storage = || RamStorage::new(schema(), capacity, None).unwrap();
        let file = match target {
            0 | 1 => dir.path().join(SAMPLER_FILE),
            _ => dir.path().join(META),
        };
        let damage_or_replace = |file: &Path| {
            if target == 1 {
                std::fs::write(file, &random).unwrap();
            } else {
                apply(file, &damages);
            }
        };
        match which {
            0 => {
                let mut buffer = ReplayBuffer::new(storage(), Uniform::new(3));
                write(&mut buffer, 0..13);
                buffer.save(dir.path()).unwrap();
                damage_or_replace(&file);
                load_and_use(dir.path(), Uniform::new(0));
            }
            1 => {
                let sampler = Prioritized::new(capacity, PrioritizedConfig::default(), 3).unwrap();
                let mut buffer = ReplayBuffer::new(storage(), sampler);
                write(&mut buffer, 0..13);
                buffer.save(dir.path()).unwrap();
                damage_or_replace(&file);
                let fresh = Prioritized::new(capacity, PrioritizedConfig::default(), 0).unwrap();
                load_and_use(dir.path(), fresh);
            }
            2 => {
                let sampler = WithoutReplacement::new(capacity, LastBatch::Merge, 3).unwrap();
                let mut buffer = ReplayBuffer::new(storage(), sampler);
                write(&mut buffer, 0..13);
                let mut batch = Batch::new(&schema(), 7).unwrap();
                buffer.sample_rows(&mut batch, 3).unwrap();
                buffer.save(dir.path()).unwrap();
                damage_or_replace(&file);
                load_and_use(dir.path(), WithoutReplacement::new(capacity, LastBatch::Merge, 0).unwrap());
            }
            _ => {
                let mut buffer = ReplayBuffer::new(storage(), SliceSampler::new(2, 3).unwrap());
                write(&mut buffer, 0..13);
                buffer.save(dir.path()).unwrap();
                damage_or_replace(&file);
                load_and_use(dir.path(), SliceSampler::new(2, 0).unwrap());
            }
        }
    }
}
