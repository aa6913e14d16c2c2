use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom};

use proptest::prelude::*;
use rl_core::{Column, DType, Flag};

use super::header::{
    MAX_SCHEMA_BYTES, OFF_CAPACITY, OFF_HEADER_BYTES, OFF_RESERVED_TAIL, OFF_SCHEMA,
    OFF_SCHEMA_LEN, OFF_VERSION,
};
use super::*;
use crate::storage::COLUMN_ALIGN;
use std::io::Read;

fn all_dtypes() -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[3]),
        Column::scalar("action", DType::U32),
        Column::scalar("step", DType::I64),
        Column::new("pixels", DType::U8, &[2, 2]),
        Column::scalar("done", DType::Bool),
    ])
    .unwrap()
}

/// `id` is the global write index; the other columns derive from it.
fn id_schema() -> Schema {
    Schema::new([
        Column::scalar("id", DType::I64),
        Column::new("x", DType::F32, &[2]),
        Column::scalar("flag", DType::Bool),
    ])
    .unwrap()
}

fn x_of(id: i64) -> [f32; 2] {
    [id as f32 * 0.5, -(id as f32)]
}

fn flag_of(id: i64) -> Flag {
    Flag::new(id % 3 == 0)
}

fn options() -> MemmapOptions {
    MemmapOptions::default()
}

fn strict() -> MemmapOptions {
    MemmapOptions {
        fallback: Fallback::Refuse,
    }
}

/// A minimal ring writer over `id_schema`, as a replay buffer would drive the storage.
struct Writer {
    ring: RingState,
    capacity: usize,
}

impl Writer {
    fn new(storage: &MemmapStorage) -> Self {
        Self {
            ring: storage.restored(),
            capacity: storage.capacity(),
        }
    }

    fn write(&mut self, storage: &mut MemmapStorage, rows: usize) {
        storage.prepare_write(&self.ring, rows).unwrap();
        for j in 0..rows {
            let position = (self.ring.cursor + j) % self.capacity;
            let id = (self.ring.written + j as u64) as i64;
            bytemuck::cast_slice_mut::<u8, i64>(storage.column_mut(0))[position] = id;
            bytemuck::cast_slice_mut::<u8, [f32; 2]>(storage.column_mut(1))[position] = x_of(id);
            bytemuck::cast_slice_mut::<u8, Flag>(storage.column_mut(2))[position] = flag_of(id);
        }
        self.ring.cursor = (self.ring.cursor + rows) % self.capacity;
        self.ring.len = (self.ring.len + rows).min(self.capacity);
        self.ring.written += rows as u64;
    }
}

/// The ids of the rows a storage returns, in ring order, checking that every row is
/// whole (its other columns match its id).
fn stored_ids(storage: &MemmapStorage) -> Vec<i64> {
    let ring = storage.restored();
    let ids: &[i64] = bytemuck::cast_slice(storage.column(0));
    let xs: &[[f32; 2]] = bytemuck::cast_slice(storage.column(1));
    let flags: &[Flag] = bytemuck::cast_slice(storage.column(2));
    (0..ring.len)
        .map(|i| {
            let p = ring.position(i, storage.capacity());
            let id = ids[p];
            assert_eq!(xs[p], x_of(id), "row at position {p} is torn");
            assert_eq!(flags[p], flag_of(id), "row at position {p} is torn");
            id
        })
        .collect()
}

fn create(path: &Path, capacity: usize) -> MemmapStorage {
    MemmapStorage::create(path, id_schema(), capacity, options()).unwrap()
}

/// Overwrites `bytes` at `offset` of a closed file.
fn poke(path: &Path, offset: u64, bytes: &[u8]) {
    let mut file = OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.write_all(bytes).unwrap();
}

/// Reads `len` bytes at `offset` of a closed file.
fn peek(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut file = File::open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    let mut bytes = vec![0u8; len];
    file.read_exact(&mut bytes).unwrap();
    bytes
}

#[test]
fn every_dtype_round_trips_through_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.rlmm");
    let capacity = 37;
    let mut storage =
        MemmapStorage::create(&path, all_dtypes(), capacity, MemmapOptions::default()).unwrap();
    assert_eq!(storage.restored(), RingState::default());
    assert_eq!(storage.location(), Location::File);
    let obs: Vec<f32> = (0..capacity * 3).map(|i| i as f32 * 0.25 - 3.0).collect();
    let action: Vec<u32> = (0..capacity as u32).map(|i| i * 7 + 1).collect();
    let step: Vec<i64> = (0..capacity as i64)
        .map(|i| i - 1_000_000_000_000)
        .collect();
    let pixels: Vec<u8> = (0..capacity * 4).map(|i| (i * 13) as u8).collect();
    let done: Vec<Flag> = (0..capacity).map(|i| Flag::new(i % 4 == 1)).collect();
    let ring = RingState {
        cursor: 0,
        len: capacity,
        written: capacity as u64,
        episodes: 9,
        episode_start: 33,
    };
    storage
        .prepare_write(&RingState::default(), capacity)
        .unwrap();
    storage
        .column_mut(0)
        .copy_from_slice(bytemuck::cast_slice(&obs));
    storage
        .column_mut(1)
        .copy_from_slice(bytemuck::cast_slice(&action));
    storage
        .column_mut(2)
        .copy_from_slice(bytemuck::cast_slice(&step));
    storage.column_mut(3).copy_from_slice(&pixels);
    storage
        .column_mut(4)
        .copy_from_slice(bytemuck::cast_slice(&done));
    storage.commit(&ring).unwrap();
    drop(storage);

    let storage =
        MemmapStorage::open_with(&path, &all_dtypes(), capacity, MemmapOptions::default()).unwrap();
    assert_eq!(storage.restored(), ring);
    assert_eq!(storage.schema(), &all_dtypes());
    assert_eq!(storage.capacity(), capacity);
    assert_eq!(storage.path(), path);
    assert_eq!(bytemuck::cast_slice::<u8, f32>(storage.column(0)), obs);
    assert_eq!(bytemuck::cast_slice::<u8, u32>(storage.column(1)), action);
    assert_eq!(bytemuck::cast_slice::<u8, i64>(storage.column(2)), step);
    assert_eq!(storage.column(3), pixels);
    assert_eq!(bytemuck::cast_slice::<u8, Flag>(storage.column(4)), done);
    for index in 0..5 {
        assert_eq!(storage.column(index).as_ptr() as usize % COLUMN_ALIGN, 0);
    }
}

#[test]
fn plan_adds_up_to_the_file_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.rlmm");
    let plan = MemmapStorage::plan(&all_dtypes(), 1000).unwrap();
    assert_eq!(plan.lines().len(), 6);
    assert!(plan.lines().iter().all(|l| l.location == Location::File));
    assert_eq!(plan.total(Location::Ram), 0);
    let storage =
        MemmapStorage::create(&path, all_dtypes(), 1000, MemmapOptions::default()).unwrap();
    let file_len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(plan.total(Location::File), file_len);
    assert_eq!(storage.memory_plan(), plan);
    assert!(MemmapStorage::plan(&all_dtypes(), 0).is_err());
    assert!(!path.with_extension("other").exists());
}

/// Whether the file system of `dir` reserves blocks (`fallocate`): not every one does,
/// and there `create` and `open` leave files sparse.
#[cfg(target_os = "linux")]
fn reserves_blocks(dir: &Path) -> bool {
    let probe = dir.join("probe");
    let file = File::create(&probe).unwrap();
    let reserves =
        rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, 4096).is_ok();
    drop(file);
    std::fs::remove_file(probe).unwrap();
    reserves
}

/// Bytes of disk a file holds.
#[cfg(target_os = "linux")]
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
#[test]
fn a_large_storage_is_reserved_on_disk_but_not_prefaulted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.rlmm");
    let schema = Schema::new([Column::new("obs", DType::F32, &[1024])]).unwrap();
    let capacity = 64 << 10; // 64 Ki rows of 4 KiB: 256 MiB
    let rss_before = rl_core::ProcessMemory::read().unwrap().rss_bytes;
    let mut storage =
        MemmapStorage::create(&path, schema, capacity, MemmapOptions::default()).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, 4096 + (256 << 20));
    if reserves_blocks(dir.path()) {
        assert!(
            allocated(&path) >= len,
            "{} of {len} bytes",
            allocated(&path)
        );
    }
    // Rows written at both ends are stored; the untouched middle is never paged in.
    let before = RingState {
        cursor: capacity - 1,
        written: capacity as u64 - 1,
        ..RingState::default()
    };
    let ring = RingState {
        cursor: 1,
        len: 2,
        written: capacity as u64 + 1,
        ..RingState::default()
    };
    storage.prepare_write(&before, 2).unwrap();
    let column = storage.column_mut(0);
    let end = column.len();
    column[..4].copy_from_slice(&7f32.to_le_bytes());
    column[end - 4096..end - 4092].copy_from_slice(&8f32.to_le_bytes());
    storage.commit(&ring).unwrap();
    let rss_after = rl_core::ProcessMemory::read().unwrap().rss_bytes;
    // Other tests run in parallel threads: allow 64 MiB of unrelated growth.
    assert!(rss_after.saturating_sub(rss_before) < 64 << 20);
    drop(storage);
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    let column = storage.column(0);
    assert_eq!(column[..4], 7f32.to_le_bytes());
    assert_eq!(column[column.len() - 4096..][..4], 8f32.to_le_bytes());
}

#[cfg(target_os = "linux")]
#[test]
fn opening_to_write_reserves_the_blocks_a_sparse_file_lacks() {
    use rustix::fs::{FallocateFlags, fallocate};

    let dir = tempfile::tempdir().unwrap();
    if !reserves_blocks(dir.path()) {
        eprintln!("skipped: the file system of the temporary folder reserves no blocks");
        return;
    }
    let path = dir.path().join("sparse.rlmm");
    let mut storage = create(&path, 4096);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 5);
    storage.commit(&writer.ring).unwrap();
    drop(storage);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(allocated(&path) >= len);
    // What a copy that keeps holes makes: the id column's pages past row 511 (no rows
    // there) lose their blocks.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    let hole = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    fallocate(&file, hole, 2 * 4096, 7 * 4096).unwrap();
    drop(file);
    let sparse = allocated(&path);
    assert!(sparse < len, "{sparse} of {len} bytes");
    let before = contents(&path);

    // A reader reserves nothing...
    drop(MemmapStorage::open_read_only(&path, strict()).unwrap());
    assert_eq!(allocated(&path), sparse);
    // ...a writer reserves the holes and changes no byte.
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    assert!(
        allocated(&path) >= len,
        "{} of {len} bytes",
        allocated(&path)
    );
    assert_eq!(stored_ids(&storage), [0, 1, 2, 3, 4]);
    drop(storage);
    assert_eq!(contents(&path), before);
}

#[test]
fn writes_into_free_positions_need_no_header_update() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("free.rlmm");
    let mut storage = create(&path, 8);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 3);
    storage.commit(&writer.ring).unwrap();
    let seq = storage.newest.seq;
    writer.write(&mut storage, 5); // positions 3..8: free
    assert_eq!(storage.newest.seq, seq);
    storage.commit(&writer.ring).unwrap();
    assert_eq!(storage.newest.seq, seq + 1);
    drop(storage);
    let storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(stored_ids(&storage), (0..8).collect::<Vec<_>>());
}

#[test]
fn a_reservation_drops_exactly_the_rows_the_write_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reserve.rlmm");
    let mut storage = create(&path, 8);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 8);
    storage.commit(&writer.ring).unwrap();
    let seq = storage.newest.seq;
    writer.write(&mut storage, 1); // id 8 over id 0: only id 0 leaves
    assert_eq!(storage.newest.seq, seq + 1);
    assert_eq!(
        storage.newest.ring,
        RingState {
            cursor: 0,
            len: 7,
            written: 8,
            ..RingState::default()
        }
    );
    writer.write(&mut storage, 1); // id 9 over id 1: the next reservation
    assert_eq!(storage.newest.seq, seq + 2);
    assert_eq!(storage.newest.ring.len, 7);
    assert_eq!(storage.newest.ring.written, 9);
    writer.write(&mut storage, 5); // ids 10..15 over ids 2..7
    assert_eq!(storage.newest.seq, seq + 3);
    assert_eq!(storage.newest.ring.len, 3);
    drop(storage); // a crash: nothing committed since id 7

    let storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(storage.restored().written, 10);
    // Ids 7 (committed, never overwritten), 8 and 9 (written since, whole).
    assert_eq!(stored_ids(&storage), [7, 8, 9]);
    assert_eq!(storage.recovery().fallback, None);
    assert_eq!(storage.recovery().sequence, seq + 3);
    assert_eq!(storage.recovery().rows, 3);
}

#[test]
fn a_commit_in_a_partly_filled_ring_survives_a_wrapping_write() {
    // The case: 4041 rows committed into 4096, 42 more written, then a crash.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wrap.rlmm");
    let mut storage = create(&path, 4096);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 4041);
    storage.commit(&writer.ring).unwrap();
    writer.write(&mut storage, 42); // fits before the end: no committed row touched
    writer.write(&mut storage, 20); // 13 free positions, then ids 0..7 overwritten
    drop(storage);
    let storage = MemmapStorage::open(&path, options()).unwrap();
    let ids = stored_ids(&storage);
    // Every committed id but the 7 overwritten ones, plus the 42 written after.
    assert_eq!(ids, (7..4083).collect::<Vec<_>>());
}
#[test]
fn prepare_write_and_commit_reject_impossible_rings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-ring.rlmm");
    let mut storage = create(&path, 8);
    let bad = RingState {
        cursor: 8,
        ..RingState::default()
    };
    assert!(storage.prepare_write(&bad, 1).is_err());
    assert!(storage.commit(&bad).is_err());
    let err = storage
        .prepare_write(&RingState::default(), 9)
        .unwrap_err()
        .to_string();
    assert!(err.contains("smaller chunks"), "{err}");
    drop(storage);
    assert_eq!(
        MemmapStorage::open(&path, options()).unwrap().restored(),
        RingState::default()
    );
}

#[test]
fn commit_and_prepare_write_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alloc.rlmm");
    let mut storage = create(&path, 64);
    let mut writer = Writer::new(&storage);
    for _ in 0..20 {
        writer.write(&mut storage, 7);
        storage.commit(&writer.ring).unwrap();
    }
    let seq = storage.newest.seq;
    let ((), stats) = rl_testkit::measure(|| {
        for round in 0..40 {
            writer.write(&mut storage, 1 + round % 9);
            if round % 3 == 0 {
                storage.commit(&writer.ring).unwrap();
            }
        }
    });
    assert_eq!(stats.allocations, 0, "{stats:?}");
    // Reservations happened too (more header updates than the 14 commits).
    assert!(
        storage.newest.seq - seq > 14,
        "{}",
        storage.newest.seq - seq
    );
}

#[test]
fn a_truncated_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.rlmm");
    let storage = create(&path, 1000);
    let full = std::fs::metadata(&path).unwrap().len();
    drop(storage);
    for short in [full - 1, 4096 + 100, 4095, 100, 3] {
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(short)
            .unwrap();
        match MemmapStorage::open(&path, options()) {
            Err(Error::Truncated {
                expected, actual, ..
            }) => {
                assert_eq!(actual, short);
                assert!(expected > short);
            }
            other => panic!("{short} bytes: {other:?}"),
        }
    }
    let err = MemmapStorage::open(&path, options())
        .unwrap_err()
        .to_string();
    assert!(err.contains("truncated"), "{err}");
}

#[test]
fn a_foreign_file_is_refused_by_its_magic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.txt");
    std::fs::write(&path, b"just some text, not a storage").unwrap();
    assert!(matches!(
        MemmapStorage::open(&path, options()),
        Err(Error::BadMagic { .. })
    ));
    let path = dir.path().join("magic.rlmm");
    drop(create(&path, 10));
    poke(&path, 0, b"X");
    assert!(matches!(
        MemmapStorage::open(&path, options()),
        Err(Error::BadMagic { .. })
    ));
}

#[test]
fn another_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.rlmm");
    drop(create(&path, 10));
    poke(&path, OFF_VERSION as u64, &2u32.to_le_bytes());
    match MemmapStorage::open(&path, options()) {
        Err(Error::UnsupportedVersion {
            found: 2,
            supported: 1,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_damaged_static_header_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("static.rlmm");
    drop(create(&path, 10));
    // A column name in the schema JSON: `"id"` -> `"ie"`.
    let json = peek(&path, OFF_SCHEMA as u64, 40);
    let at = json.windows(4).position(|w| w == b"\"id\"").unwrap();
    poke(&path, (OFF_SCHEMA + at + 2) as u64, b"e");
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("checksum"), "{err}");
    // A capacity changed by hand is caught the same way.
    poke(&path, (OFF_SCHEMA + at + 2) as u64, b"d");
    assert!(MemmapStorage::open(&path, options()).is_ok());
    poke(&path, OFF_CAPACITY as u64, &11u64.to_le_bytes());
    assert!(matches!(
        MemmapStorage::open(&path, options()),
        Err(Error::Corrupt { .. })
    ));
}

/// A file with two valid slots: slot A (sequence 3) holds ids 0..3, slot B (sequence
/// 4, in force) ids 0..5.
fn two_commits(path: &Path) -> (RingState, RingState) {
    let mut storage = create(path, 10);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 3);
    storage.commit(&writer.ring).unwrap();
    let first = writer.ring;
    writer.write(&mut storage, 2);
    storage.commit(&writer.ring).unwrap();
    assert_eq!(storage.newest.seq, 4);
    assert_eq!(storage.newest_index, 1);
    (first, writer.ring)
}

#[test]
fn a_torn_newest_slot_falls_back_to_the_other_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("torn.rlmm");
    let (first, second) = two_commits(&path);
    let storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(storage.restored(), second);
    assert_eq!(
        *storage.recovery(),
        Recovery {
            sequence: 4,
            ring: second,
            rows: 5,
            fallback: None
        }
    );
    drop(storage);
    // A slot write cut short: new cursor stored, the rest (and the checksum) not.
    poke(&path, (SLOT_OFFSETS[1] + 8) as u64, &9u64.to_le_bytes());
    let storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(storage.restored(), first);
    assert_eq!(stored_ids(&storage), [0, 1, 2]);
    let recovery = *storage.recovery();
    assert_eq!((recovery.sequence, recovery.rows), (3, 3));
    assert_eq!(
        recovery.fallback,
        Some(SlotFallback {
            slot: 1,
            claimed_sequence: 4,
            reason: SlotDamage::Checksum
        })
    );
    let told = recovery.to_string();
    assert!(told.contains("slot B (claiming sequence 4)"), "{told}");
    drop(storage);
    // A strict open refuses, and says what it would have recovered.
    let err = MemmapStorage::open(&path, strict()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Fallback {
                sequence: 3,
                rows: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("Fallback::Refuse"), "{err}");
    assert!(matches!(
        MemmapStorage::open_read_only(&path, strict()),
        Err(Error::Fallback { .. })
    ));
    // The next commit goes to the damaged slot, not over the good one.
    let mut storage = MemmapStorage::open(&path, options()).unwrap();
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 4);
    storage.commit(&writer.ring).unwrap();
    drop(storage);
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    assert_eq!(stored_ids(&storage), [0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(storage.recovery().fallback, None);
}

#[test]
fn an_erased_older_slot_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("erased.rlmm");
    two_commits(&path);
    poke(&path, SLOT_OFFSETS[0] as u64, &[0u8; SLOT_LEN]);
    let storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(stored_ids(&storage), [0, 1, 2, 3, 4]);
    assert_eq!(
        storage.recovery().fallback.map(|f| (f.slot, f.reason)),
        Some((0, SlotDamage::Erased))
    );
    drop(storage);
    assert!(matches!(
        MemmapStorage::open(&path, strict()),
        Err(Error::Fallback { .. })
    ));
}

#[test]
fn a_new_file_has_both_slots_written_and_commits_first_to_slot_a() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.rlmm");
    let mut storage = create(&path, 10);
    assert_eq!(*storage.recovery(), Recovery::fresh());
    assert_eq!(storage.recovery().sequence, 2);
    for (at, slot) in SLOT_OFFSETS.into_iter().zip(FRESH_SLOTS) {
        assert_eq!(peek(&path, at as u64, SLOT_LEN), slot.encode());
    }
    drop(storage);
    storage = MemmapStorage::open(&path, strict()).unwrap();
    assert_eq!(*storage.recovery(), Recovery::fresh());
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 2);
    storage.commit(&writer.ring).unwrap();
    assert_eq!((storage.newest.seq, storage.newest_index), (3, 0));
    drop(storage);
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    assert_eq!(stored_ids(&storage), [0, 1]);
}

/// Writes the slots as an older rl-storage left them: slot A at sequence 1 with the
/// empty ring (all its `create` wrote), slot B `slot_b`.
fn older_layout(path: &Path, slot_b: &[u8; SLOT_LEN]) {
    poke(path, SLOT_OFFSETS[0] as u64, &FRESH_SLOTS[0].encode());
    poke(path, SLOT_OFFSETS[1] as u64, slot_b);
}

#[test]
fn an_erased_first_commit_is_reported_not_reopened_as_an_empty_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("first.rlmm");
    let mut storage = create(&path, 10);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 3);
    storage.commit(&writer.ring).unwrap();
    drop(storage);
    // An older file after its first commit (sequence 2, slot B) opens as it did.
    let first = Slot {
        seq: 2,
        ring: writer.ring,
    };
    older_layout(&path, &first.encode());
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    assert_eq!(stored_ids(&storage), [0, 1, 2]);
    drop(storage);
    // Slot B zeroed: the header an older file had before its first commit.
    poke(&path, SLOT_OFFSETS[1] as u64, &[0u8; SLOT_LEN]);
    let storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(
        *storage.recovery(),
        Recovery {
            sequence: 1,
            ring: RingState::default(),
            rows: 0,
            fallback: Some(SlotFallback {
                slot: 1,
                claimed_sequence: 0,
                reason: SlotDamage::Erased
            })
        }
    );
    drop(storage);
    let err = MemmapStorage::open(&path, strict()).unwrap_err();
    let message = err.to_string();
    let Error::Fallback {
        path: named,
        damaged,
        sequence: 1,
        rows: 0,
    } = err
    else {
        panic!("{err:?}");
    };
    assert_eq!(named, path);
    assert!(damaged.starts_with("commit slot B"), "{damaged}");
    assert!(message.contains("all zeros"), "{message}");
    assert!(
        message.starts_with(&path.display().to_string()),
        "{message}"
    );
    assert!(matches!(
        MemmapStorage::open_read_only(&path, strict()),
        Err(Error::Fallback { .. })
    ));
}

#[test]
fn an_older_file_never_committed_opens_with_a_report_until_its_first_commit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("older.rlmm");
    drop(create(&path, 10));
    older_layout(&path, &[0u8; SLOT_LEN]);
    assert!(matches!(
        MemmapStorage::open(&path, strict()),
        Err(Error::Fallback {
            sequence: 1,
            rows: 0,
            ..
        })
    ));
    let mut storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(storage.restored(), RingState::default());
    assert_eq!(
        storage.recovery().fallback.map(|f| (f.slot, f.reason)),
        Some((1, SlotDamage::Erased))
    );
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 4);
    storage.commit(&writer.ring).unwrap();
    assert_eq!((storage.newest.seq, storage.newest_index), (2, 1));
    drop(storage);
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    assert_eq!(stored_ids(&storage), [0, 1, 2, 3]);
    assert_eq!(storage.recovery().fallback, None);
}

#[test]
fn both_slots_damaged_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.rlmm");
    two_commits(&path);
    for at in SLOT_OFFSETS {
        poke(&path, (at + SLOT_SUM) as u64, &[0xA5]);
    }
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("neither commit slot"), "{err}");
}

/// Reads a whole closed file.
fn contents(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

/// Each byte of the header is flipped once (every bit), the file opened, the byte
/// restored. Every flip is a typed error or a reported recovery; none is a silent
/// rollback or a silent change of any kind.
#[test]
fn every_flipped_header_byte_is_an_error_or_a_reported_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flip.rlmm");
    let (first, second) = two_commits(&path);
    let pristine = contents(&path);
    let header_bytes = MemmapStorage::open(&path, options()).unwrap().header_bytes;
    assert_eq!(header_bytes, 4096);
    let (mut errors, mut fallbacks) = (0, 0);
    for (at, &byte) in pristine.iter().enumerate().take(header_bytes) {
        poke(&path, at as u64, &[byte ^ 0xFF]);
        // What the lenient open found, with its lock released before the strict one.
        let lenient = MemmapStorage::open(&path, options())
            .map(|storage| (storage.restored(), *storage.recovery()));
        let strict = MemmapStorage::open_read_only(&path, strict()).map(drop);
        match lenient {
            Err(error) => {
                errors += 1;
                assert!(
                    matches!(
                        error,
                        Error::Corrupt { .. }
                            | Error::BadMagic { .. }
                            | Error::UnsupportedVersion { .. }
                            | Error::Truncated { .. }
                    ),
                    "byte {at}: {error:?}"
                );
                // A damaged size is never taken for a truncation of the file.
                assert!(
                    !matches!(error, Error::Truncated { .. }),
                    "byte {at}: {error}"
                );
                assert!(strict.is_err(), "byte {at}");
            }
            Ok((restored, recovery)) => {
                fallbacks += 1;
                let fallback = recovery
                    .fallback
                    .unwrap_or_else(|| panic!("byte {at}: opened with no report"));
                assert!(
                    (64..192).contains(&at),
                    "byte {at} is outside the slots: {fallback}"
                );
                // Slot B holds the newest state (sequence 4), slot A the older one.
                let expected = if at < 128 { second } else { first };
                assert_eq!(restored, expected, "byte {at}");
                assert_eq!(fallback.slot, usize::from(at >= 128), "byte {at}");
                assert!(
                    matches!(strict, Err(Error::Fallback { .. })),
                    "byte {at}: {strict:?}"
                );
            }
        }
        poke(&path, at as u64, &[byte]);
    }
    // Opening for writing syncs but never changes the header.
    assert_eq!(contents(&path), pristine);
    assert_eq!(fallbacks, 128);
    assert_eq!(errors, header_bytes - 128);
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    assert_eq!(storage.restored(), second);
}

#[test]
fn a_damaged_header_size_is_corrupt_not_a_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("size.rlmm");
    drop(create(&path, 10));
    // The high byte of the header size: 0xFF00_0000_0000_1000 bytes, a multiple of a page.
    poke(&path, (OFF_HEADER_BYTES + 7) as u64, &[0xFF]);
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("checksum"), "{err}");
    assert!(!err.to_string().contains("truncated"), "{err}");
    poke(&path, (OFF_HEADER_BYTES + 7) as u64, &[0]);
    // A schema length past the end of the file names both numbers.
    poke(
        &path,
        OFF_SCHEMA_LEN as u64,
        &(MAX_SCHEMA_BYTES - 1).to_le_bytes(),
    );
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("cannot hold"), "{err}");
}

#[test]
fn reserved_bytes_and_padding_must_be_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zeros.rlmm");
    drop(create(&path, 10));
    poke(&path, OFF_RESERVED_TAIL as u64, &[1]);
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(err.to_string().contains("56..64"), "{err}");
    poke(&path, OFF_RESERVED_TAIL as u64, &[0]);
    poke(&path, 4000, &[7]);
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(err.to_string().contains("header byte 4000"), "{err}");
    poke(&path, 4000, &[0]);
    assert!(MemmapStorage::open(&path, strict()).is_ok());
}

#[test]
fn an_inconsistent_ring_with_a_valid_checksum_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring.rlmm");
    drop(create(&path, 10));
    let slot = Slot {
        seq: 5,
        ring: RingState {
            cursor: 3,
            len: 11,
            written: 20,
            ..RingState::default()
        },
    };
    poke(&path, SLOT_OFFSETS[1] as u64, &slot.encode());
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("sequence 5"), "{err}");
}

#[test]
fn open_with_names_both_layouts_on_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mismatch.rlmm");
    drop(create(&path, 10));
    let other = Schema::new([Column::scalar("id", DType::I64)]).unwrap();
    let err = MemmapStorage::open_with(&path, &other, 10, options()).unwrap_err();
    let Error::FileMismatch {
        expected, found, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(expected, "capacity 10, columns id i64");
    assert_eq!(found, "capacity 10, columns id i64, x f32[2], flag bool");
    let err = MemmapStorage::open_with(&path, &id_schema(), 11, options()).unwrap_err();
    assert!(matches!(err, Error::FileMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("capacity 11"), "{err}");
    assert!(MemmapStorage::open_with(&path, &id_schema(), 10, options()).is_ok());
}

#[test]
fn a_second_writer_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock.rlmm");
    let first = create(&path, 10);
    assert!(matches!(
        MemmapStorage::open(&path, options()),
        Err(Error::Locked { .. })
    ));
    drop(first);
    let second = MemmapStorage::open(&path, options()).unwrap();
    assert!(matches!(
        MemmapStorage::open(&path, options()),
        Err(Error::Locked { .. })
    ));
    drop(second);
}

#[test]
fn create_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("exists.rlmm");
    let mut storage = create(&path, 10);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 4);
    storage.commit(&writer.ring).unwrap();
    drop(storage);
    let err = MemmapStorage::create(&path, id_schema(), 10, options()).unwrap_err();
    let Error::Io { source, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(err.to_string().contains("MemmapStorage::open"), "{err}");
    // The existing file is untouched.
    let storage = MemmapStorage::open(&path, options()).unwrap();
    assert_eq!(stored_ids(&storage), [0, 1, 2, 3]);
    let other = std::fs::File::create(dir.path().join("plain")).unwrap();
    drop(other);
}

#[test]
fn the_storage_can_move_to_another_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<MemmapStorage>();
}

#[test]
fn opening_a_missing_file_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = MemmapStorage::open(dir.path().join("none.rlmm"), options()).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("none.rlmm"), "{err}");
}

#[test]
fn a_read_only_open_shares_the_file_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.rlmm");
    let mut storage = create(&path, 10);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 4);
    storage.commit(&writer.ring).unwrap();
    // A reader is kept out while the writer lives...
    assert!(matches!(
        MemmapStorage::open_read_only(&path, options()),
        Err(Error::Locked { .. })
    ));
    drop(storage);
    let before = contents(&path);
    // ...then any number of readers share the file, and writers are kept out.
    let mut first = MemmapStorage::open_read_only(&path, options()).unwrap();
    let second = MemmapStorage::open_read_only(&path, strict()).unwrap();
    assert!(first.is_read_only());
    assert_eq!(stored_ids(&first), [0, 1, 2, 3]);
    assert_eq!(stored_ids(&second), [0, 1, 2, 3]);
    let err = MemmapStorage::open(&path, options()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains("open_read_only"), "{err}");
    // Writes and commits are refused; private pages never reach the file.
    let ring = first.restored();
    assert!(matches!(
        first.prepare_write(&ring, 1),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(first.commit(&ring), Err(Error::ReadOnly { .. })));
    first.column_mut(0)[..8].copy_from_slice(&99i64.to_le_bytes());
    drop((first, second));
    assert_eq!(contents(&path), before);
    assert_eq!(
        stored_ids(&MemmapStorage::open(&path, options()).unwrap()),
        [0, 1, 2, 3]
    );
}

#[cfg(unix)]
#[test]
fn a_read_only_file_opens_read_only() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.rlmm");
    let mut storage = create(&path, 10);
    let mut writer = Writer::new(&storage);
    writer.write(&mut storage, 3);
    storage.commit(&writer.ring).unwrap();
    drop(storage);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    let storage = MemmapStorage::open_read_only(&path, options()).unwrap();
    assert_eq!(stored_ids(&storage), [0, 1, 2]);
    drop(storage);
    // Opening for writing needs write permission (unless the tests run as root).
    let writable = OpenOptions::new().write(true).open(&path).is_ok();
    if !writable {
        let err = MemmapStorage::open(&path, options()).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
    }
}

#[test]
fn create_goes_through_a_temporary_name_and_clears_stale_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("atomic.rlmm");
    // What a `create` killed before its rename leaves: a temporary file, no file at
    // `path`.
    let stale = dir.path().join(".atomic.rlmm.rlmm-tmp-999999999");
    std::fs::write(&stale, b"half a header").unwrap();
    let unrelated = dir.path().join(".other.rlmm.rlmm-tmp-1");
    std::fs::write(&unrelated, b"another file's").unwrap();
    assert!(matches!(
        MemmapStorage::open(&path, options()),
        Err(Error::Io { .. })
    ));
    let storage = create(&path, 10);
    assert!(!stale.exists(), "the stale temporary file is gone");
    assert!(unrelated.exists(), "another path's temporary file stays");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    drop(storage);
    assert_eq!(
        *MemmapStorage::open(&path, strict()).unwrap().recovery(),
        Recovery::fresh()
    );
    // A path without a file name is refused before anything is created.
    let err = MemmapStorage::create(dir.path().join(".."), id_schema(), 10, options());
    assert!(err.is_err());
}

#[derive(Clone, Debug)]
enum Op {
    Write(usize),
    Commit,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..64).prop_map(Op::Write),
        2 => Just(Op::Commit),
        1 => Just(Op::Crash),
    ]
}

/// The model of the file: the ids of the committed rows, oldest first.
fn committed_after_update(writer: &RingState, len: usize) -> VecDeque<i64> {
    let end = writer.written as i64;
    (end - len as i64..end).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The commit contract against a model: after a crash, every row of the last commit
    /// that no later write overwrote comes back whole, and nothing else but the rows the
    /// header recorded since.
    #[test]
    fn reopening_after_a_crash_keeps_every_committed_row_not_overwritten(
        capacity in 1usize..40,
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.rlmm");
        let mut storage = create(&path, capacity);
        let mut writer = Writer::new(&storage);
        // The rows the header counts (the model of the slot in force).
        let mut committed: VecDeque<i64> = VecDeque::new();
        // The ids of the last commit: the contract's promise.
        let mut last_commit: Vec<i64> = Vec::new();
        for op in ops {
            match op {
                Op::Write(rows) => {
                    let rows = 1 + (rows - 1) % capacity;
                    // Ids the write overwrites, at positions (written + j) % capacity.
                    let overwritten = writer.ring.written as i64 - capacity as i64;
                    let hits = committed
                        .iter()
                        .any(|&id| id >= overwritten && id < overwritten + rows as i64);
                    if hits {
                        let len = writer.ring.len.min(capacity - rows);
                        committed = committed_after_update(&writer.ring, len);
                    }
                    writer.write(&mut storage, rows);
                }
                Op::Commit => {
                    storage.commit(&writer.ring).unwrap();
                    committed = committed_after_update(&writer.ring, writer.ring.len);
                    last_commit = committed.iter().copied().collect();
                }
                Op::Crash => {
                    // Garbage in every position that holds no committed row.
                    let keep: Vec<usize> = committed
                        .iter()
                        .map(|&id| id as usize % capacity)
                        .collect();
                    for position in (0..capacity).filter(|p| !keep.contains(p)) {
                        bytemuck::cast_slice_mut::<u8, i64>(storage.column_mut(0))[position] =
                            -1 - position as i64;
                        bytemuck::cast_slice_mut::<u8, [f32; 2]>(storage.column_mut(1))
                            [position] = [f32::NAN; 2];
                        storage.column_mut(2)[position] = 0xEE;
                    }
                    let written = writer.ring.written as i64;
                    drop(storage);
                    storage = MemmapStorage::open_with(
                        &path,
                        &id_schema(),
                        capacity,
                        MemmapOptions { fallback: Fallback::Refuse },
                    )
                    .unwrap();
                    let restored = storage.restored();
                    let ids = stored_ids(&storage);
                    prop_assert_eq!(&ids, &committed.iter().copied().collect::<Vec<_>>());
                    prop_assert_eq!(restored.cursor as u64, restored.written % capacity as u64);
                    // The contract, independently of the model: no committed id is lost
                    // unless a later write reached its position.
                    for id in &last_commit {
                        prop_assert!(
                            *id < written - capacity as i64 || ids.contains(id),
                            "committed id {} lost ({} written, capacity {})",
                            id,
                            written,
                            capacity
                        );
                    }
                    writer = Writer::new(&storage);
                    last_commit = ids;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever a writer did (writes, reservations, commits, reopens), zeroing either slot
    /// of its file is never silent: a lenient open continues from the other slot and
    /// reports the erased one, a strict open refuses naming the file and the slot. And
    /// slot A only ever holds odd sequence numbers, slot B even ones.
    #[test]
    fn an_erased_slot_is_always_reported(
        capacity in 1usize..20,
        ops in proptest::collection::vec(op(), 0..30),
        erased in 0usize..2,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("erased.rlmm");
        let mut storage = create(&path, capacity);
        let mut writer = Writer::new(&storage);
        // What each slot holds: every operation writes one slot at most.
        let mut slots = FRESH_SLOTS;
        for op in ops {
            match op {
                Op::Write(rows) => writer.write(&mut storage, 1 + (rows - 1) % capacity),
                Op::Commit => storage.commit(&writer.ring).unwrap(),
                Op::Crash => {
                    drop(storage);
                    storage = MemmapStorage::open(&path, strict()).unwrap();
                    writer = Writer::new(&storage);
                }
            }
            slots[storage.newest_index] = storage.newest;
        }
        drop(storage);
        for (index, slot) in slots.iter().enumerate() {
            prop_assert_eq!(slot.seq % 2, 1 - index as u64, "slot {} holds {:?}", index, slot);
        }

        poke(&path, SLOT_OFFSETS[erased] as u64, &[0u8; SLOT_LEN]);
        let kept = slots[1 - erased];
        let storage = MemmapStorage::open(&path, options()).unwrap();
        prop_assert_eq!(
            *storage.recovery(),
            Recovery {
                sequence: kept.seq,
                ring: kept.ring,
                rows: kept.ring.len,
                fallback: Some(SlotFallback {
                    slot: erased,
                    claimed_sequence: 0,
                    reason: SlotDamage::Erased,
                }),
            }
        );
        drop(storage);
        match MemmapStorage::open(&path, strict()) {
            Err(Error::Fallback { path: named, damaged, sequence, .. }) => {
                prop_assert_eq!(named, path);
                prop_assert!(damaged.starts_with(["commit slot A", "commit slot B"][erased]));
                prop_assert_eq!(sequence, kept.seq);
            }
            other => prop_assert!(false, "a strict open gave {:?}", other),
        }
    }
}

/// Opens `path` both ways and, when it opens, samples and (when writable) writes and
/// commits through a replay buffer: a typed error or a working storage, never a panic
/// or a read past the file.
fn open_and_use(path: &Path) {
    if let Ok(storage) = MemmapStorage::open_read_only(path, options()) {
        let schema = storage.schema().clone();
        let mut buffer = crate::replay::ReplayBuffer::new(storage, crate::sampler::Uniform::new(0));
        let mut batch = crate::Batch::new(&schema, 4).unwrap();
        if !buffer.is_empty() {
            buffer.sample(&mut batch).unwrap();
        }
    }
    if let Ok(storage) = MemmapStorage::open(path, options()) {
        let ring = storage.restored();
        prop_assert_ok(ring.validate(storage.capacity()));
        let schema = storage.schema().clone();
        let mut buffer = crate::replay::ReplayBuffer::new(storage, crate::sampler::Uniform::new(0));
        let mut batch = crate::Batch::new(&schema, 4).unwrap();
        if !buffer.is_empty() {
            buffer.sample(&mut batch).unwrap();
        }
        buffer.commit().unwrap();
    }
}

fn prop_assert_ok(result: Result<()>) {
    assert!(result.is_ok(), "{result:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The header parser fed random files and damaged real ones (bytes set anywhere in
    /// the header or the first rows, the file cut or extended): never a panic, always a
    /// typed error or a storage that samples and commits.
    #[test]
    fn random_and_damaged_files_never_panic(
        random in proptest::collection::vec(any::<u8>(), 0..6000),
        sets in proptest::collection::vec((0usize..4096 + 1024, any::<u8>()), 0..8),
        cut in proptest::option::of(0u64..20_000),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("random.rlmm");
        let mut bytes = random.clone();
        if bytes.len() >= 8 && random.first().is_some_and(|b| b % 2 == 0) {
            bytes[..8].copy_from_slice(b"RLMEMMAP"); // get past the magic now and then
        }
        std::fs::write(&path, &bytes).unwrap();
        open_and_use(&path);

        let path = dir.path().join("damaged.rlmm");
        two_commits(&path);
        for &(at, value) in &sets {
            poke(&path, at as u64, &[value]);
        }
        if let Some(len) = cut {
            OpenOptions::new().write(true).open(&path).unwrap().set_len(len).unwrap();
        }
        open_and_use(&path);
    }
}

/// Held by the tests that measure the process's resident file pages, which another of
/// them mapping 128 MiB at the same time would change.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
static RESIDENT_FILE_PAGES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A new storage at `path` of 32 Ki rows of 1,024 floats (128 MiB), every float its
/// index in the column, written through the mapping and not committed.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn counted_rows(path: &Path) -> (MemmapStorage, usize) {
    let schema = Schema::new([Column::new("obs", DType::F32, &[1024])]).unwrap();
    let capacity = 32 << 10;
    let mut storage =
        MemmapStorage::create(path, schema, capacity, MemmapOptions::default()).unwrap();
    storage
        .prepare_write(&RingState::default(), capacity)
        .unwrap();
    for (i, value) in bytemuck::cast_slice_mut::<u8, f32>(storage.column_mut(0))
        .iter_mut()
        .enumerate()
    {
        *value = i as f32;
    }
    (storage, capacity)
}

/// `release_pages` takes the file's pages out of the process's resident set and loses
/// nothing: rows written before it read back the same, before and after a commit and a
/// reopen.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
#[test]
fn released_pages_leave_the_resident_set_and_keep_their_bytes() {
    let _alone = RESIDENT_FILE_PAGES
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("released.rlmm");
    let (mut storage, capacity) = counted_rows(&path);
    let ring = RingState {
        cursor: 0,
        len: capacity,
        written: capacity as u64,
        ..RingState::default()
    };
    let mapped = rl_core::ProcessMemory::read().unwrap().rss_file_bytes;
    storage.release_pages().unwrap();
    let released = rl_core::ProcessMemory::read().unwrap().rss_file_bytes;
    assert!(
        mapped.saturating_sub(released) >= 96 << 20,
        "resident file pages {mapped} -> {released}"
    );
    let intact = |storage: &MemmapStorage| {
        bytemuck::cast_slice::<u8, f32>(storage.column(0))
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as f32)
    };
    assert!(intact(&storage), "dirty pages kept their bytes");
    storage.release_pages().unwrap();
    storage.commit(&ring).unwrap();
    drop(storage);
    let storage = MemmapStorage::open(&path, strict()).unwrap();
    assert_eq!(storage.restored().written, capacity as u64);
    assert!(
        intact(&storage),
        "the rows survive a release, a commit and a reopen"
    );
}

/// `read_column` reads the file: rows read at random leave nothing mapped in the
/// process (read through the mapping, every row would map at least its page, and on
/// Linux with large page-cache folios about 1 MiB around it), and they hold what the
/// mapping wrote.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
#[test]
fn rows_read_by_copy_are_not_mapped() {
    let _alone = RESIDENT_FILE_PAGES
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (storage, capacity) = counted_rows(&dir.path().join("read.rlmm"));
    assert!(storage.reads_by_copy());
    storage.release_pages().unwrap();
    let before = rl_core::ProcessMemory::read().unwrap().rss_file_bytes;
    let mut row = vec![0u8; 4096];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..4096 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let position = (state % capacity as u64) as usize;
        storage.read_column(0, position * 4096, &mut row);
        let values = bytemuck::cast_slice::<u8, f32>(&row);
        assert!(
            values
                .iter()
                .enumerate()
                .all(|(j, &v)| v == (position * 1024 + j) as f32),
            "row {position}"
        );
    }
    let after = rl_core::ProcessMemory::read().unwrap().rss_file_bytes;
    assert!(
        after.saturating_sub(before) < 8 << 20,
        "4096 rows read by copy grew the resident file pages {before} -> {after}"
    );
}
