//! Storage in one memory-mapped file, with commits that survive a crash of the process.
//!
//! A [`MemmapStorage`] keeps every column of a buffer in a single file: a header, then the
//! columns laid out by `ColumnLayout` (each column page-aligned). The file is created
//! sparse, so a 32 GiB buffer costs no disk and no RAM until rows are written; the page
//! cache holds what is hot. The storage is a [`HostStorage`]: the write and gather paths
//! read and write the mapped column bytes directly.
//!
//! The file format and the crash protocol are documented on [`MemmapStorage`].

use std::fmt::Write as _;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{Ordering, fence};

use memmap2::{MmapMut, MmapOptions};
use rl_core::{Location, MemoryPlan, Schema};

use crate::error::{Error, Result};
use crate::ram::plan_of;
use crate::storage::{COLUMN_ALIGN, ColumnLayout, HostStorage, RingState, Storage};

/// First eight bytes of every file.
const MAGIC: [u8; 8] = *b"RLMEMMAP";
/// The format version this build writes and reads.
const FORMAT_VERSION: u32 = 1;
const OFF_VERSION: usize = 8;
const OFF_HEADER_BYTES: usize = 16;
const OFF_CAPACITY: usize = 24;
const OFF_RESERVE: usize = 32;
const OFF_SCHEMA_LEN: usize = 40;
/// The static checksum covers the bytes before it, then the schema JSON.
const OFF_STATIC_SUM: usize = 48;
const SLOT_OFFSETS: [usize; 2] = [64, 128];
const SLOT_LEN: usize = 64;
const SLOT_SUM: usize = 56;
const OFF_SCHEMA: usize = 192;
/// Refuse to read a schema larger than this (a damaged length must not allocate gigabytes).
const MAX_SCHEMA_BYTES: u64 = 16 << 20;

/// How a [`MemmapStorage`] is created or opened.
///
/// ```
/// use rl_storage::memmap::MemmapOptions;
///
/// let defaults = MemmapOptions::default(); // reserve_rows 0: chosen from the capacity
/// let explicit = MemmapOptions { reserve_rows: 4096 };
/// assert_ne!(defaults, explicit);
/// assert_eq!(MemmapOptions::default_reserve_rows(1 << 20), 16_384);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemmapOptions {
    /// Rows a reservation frees ahead of the writer (see
    /// [`MemmapStorage`](MemmapStorage#crash-safety)): the most rows of the last commit
    /// that a crash can cost, and the number of rows written between two reservations.
    /// A reservation is cheap (a header store, no disk flush), so the default is small.
    ///
    /// `0` means: at create, [`MemmapOptions::default_reserve_rows`] of the capacity; at
    /// open, the value the file was created with. Values above the capacity act as the
    /// capacity. A write of more rows than this reserves its own size.
    pub reserve_rows: usize,
}

impl MemmapOptions {
    /// The reserve used when [`MemmapOptions::reserve_rows`] is 0:
    /// `min(max(1024, capacity / 64), max(1, capacity / 4))`, i.e. 1/64 of a large buffer,
    /// 1024 rows for a mid-sized one, and never more than a quarter of a small one.
    pub fn default_reserve_rows(capacity: usize) -> usize {
        (capacity / 64).max(1024).min((capacity / 4).max(1))
    }
}

/// One commit slot of the header: a sequence number and a ring state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    seq: u64,
    ring: RingState,
}

impl Slot {
    fn encode(&self) -> [u8; SLOT_LEN] {
        let fields = [
            self.seq,
            self.ring.cursor as u64,
            self.ring.len as u64,
            self.ring.written,
            self.ring.episodes,
            self.ring.episode_start,
        ];
        let mut bytes = [0u8; SLOT_LEN];
        for (chunk, field) in bytes.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&field.to_le_bytes());
        }
        let sum = fnv1a(FNV_OFFSET, &bytes[..SLOT_SUM]);
        bytes[SLOT_SUM..].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    /// The slot in `bytes` (`SLOT_LEN` of them), or `None` if it was never written or its
    /// checksum does not match (a torn or damaged write).
    fn decode(bytes: &[u8]) -> Option<Slot> {
        if fnv1a(FNV_OFFSET, &bytes[..SLOT_SUM]) != read_u64(bytes, SLOT_SUM) {
            return None;
        }
        let seq = read_u64(bytes, 0);
        let ring = RingState {
            cursor: usize::try_from(read_u64(bytes, 8)).ok()?,
            len: usize::try_from(read_u64(bytes, 16)).ok()?,
            written: read_u64(bytes, 24),
            episodes: read_u64(bytes, 32),
            episode_start: read_u64(bytes, 40),
        };
        (seq != 0).then_some(Slot { seq, ring })
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits, continuing from `state` (start with [`FNV_OFFSET`]).
fn fnv1a(state: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(state, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut le = [0u8; 8];
    le.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(le)
}

fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// The schema as stored in the header.
fn schema_json(schema: &Schema) -> Result<Vec<u8>> {
    serde_json::to_vec(schema)
        .map_err(|e| Error::config("schema", format!("cannot be written as JSON: {e}")))
}

/// Header bytes for a schema JSON of `json_len` bytes: the fixed part and the JSON,
/// rounded up to a page so that the columns stay page-aligned.
fn header_bytes_for(json_len: usize) -> Result<usize> {
    OFF_SCHEMA
        .checked_add(json_len)
        .and_then(|end| end.checked_next_multiple_of(COLUMN_ALIGN))
        .ok_or_else(|| Error::config("schema", "is too large to store in a file header"))
}

/// Schema and capacity in words, for mismatch errors: `capacity 100, columns obs f32[3], done bool`.
fn describe(schema: &Schema, capacity: usize) -> String {
    let mut text = format!("capacity {capacity}, columns ");
    for (i, column) in schema.columns().iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        let _ = write!(text, "{} {}", column.name(), column.dtype());
        if !column.shape().is_empty() {
            let _ = write!(text, "{:?}", column.shape());
        }
    }
    text
}

/// One plan line per column (with its page padding) and one for the header: together,
/// the file's length.
fn file_plan(schema: &Schema, layout: &ColumnLayout, header_bytes: usize) -> MemoryPlan {
    let mut plan = plan_of(schema, layout, Location::File);
    plan.add("header", Location::File, header_bytes as u64);
    plan
}

/// What `open` learned from a file's header before mapping it.
struct Header {
    schema: Schema,
    capacity: usize,
    reserve_rows: usize,
    header_bytes: usize,
    layout: ColumnLayout,
    map_len: usize,
    newest: Slot,
    newest_index: usize,
}

/// Columns in one memory-mapped file that survives the process: commits are crash-safe,
/// and reopening the file gives back the last committed ring.
///
/// The file is created sparse and never pre-faulted: its planned bytes are file bytes
/// ([`Location::File`]), paged in as rows are touched. The storage holds an exclusive lock
/// on the file for as long as it lives.
///
/// **Dropping the storage does not commit.** Rows written after the last
/// [`Storage::commit`] (or the last reservation, see [below](#crash-safety)) may be lost,
/// exactly as after a crash: call `commit` before dropping a storage whose rows you want
/// to keep.
///
/// ```
/// use rl_core::{Column, DType, Schema};
/// use rl_storage::{storage::{HostStorage, RingState, Storage}, memmap::{MemmapOptions, MemmapStorage}};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("replay.rlmm");
/// let schema = Schema::new([Column::scalar("reward", DType::F32)])?;
/// let mut storage = MemmapStorage::create(&path, schema, 100, MemmapOptions::default())?;
/// let ring = RingState { cursor: 1, len: 1, written: 1, ..RingState::default() };
/// storage.prepare_write(&RingState::default(), 1)?;
/// storage.column_mut(0)[..4].copy_from_slice(&1.5f32.to_le_bytes());
/// storage.commit(&ring)?;
/// drop(storage);
///
/// let storage = MemmapStorage::open(&path, MemmapOptions::default())?;
/// assert_eq!(storage.restored(), ring);
/// assert_eq!(storage.column(0)[..4], 1.5f32.to_le_bytes());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # File format, version 1
///
/// All integers are little-endian. Offsets are in bytes from the start of the file.
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 8 | magic `RLMEMMAP` |
/// | 8 | 4 | format version (`u32`, 1) |
/// | 12 | 4 | reserved, zero |
/// | 16 | 8 | header bytes `H` (`u64`, a multiple of 4096): the columns start at `H` |
/// | 24 | 8 | capacity in rows (`u64`) |
/// | 32 | 8 | reserve rows the file was created with (`u64`, see [`MemmapOptions`]) |
/// | 40 | 8 | length `S` of the schema JSON (`u64`) |
/// | 48 | 8 | static checksum: FNV-1a-64 over bytes 0..48, then the schema JSON |
/// | 56 | 8 | reserved, zero |
/// | 64 | 64 | commit slot A |
/// | 128 | 64 | commit slot B |
/// | 192 | `S` | the [`Schema`] as JSON (serde) |
/// | 192 + `S` | .. | zeros up to `H` |
/// | `H` | layout total | the columns, at `H +` `ColumnLayout::offset` |
///
/// A commit slot (64 bytes) holds six `u64`: a sequence number (0 = never written), then
/// the [`RingState`] fields `cursor`, `len`, `written`, `episodes`, `episode_start`; then 8
/// reserved zero bytes and, at slot offset 56, an FNV-1a-64 checksum over slot bytes
/// 0..56. A slot is valid when its checksum matches and its sequence number is not 0. The
/// file's state is the valid slot with the highest sequence number; a header update always
/// writes the *other* slot, with the next sequence number, so a write torn by a crash
/// fails its checksum and the previous state stays in force.
///
/// # Crash safety
///
/// The rows of the file are the `len` ring positions before `cursor` in the newest valid
/// slot (its *committed rows*). The storage keeps one invariant: **no committed row is
/// overwritten before a header update has removed it from the committed set.**
///
/// - [`Storage::prepare_write`] (called by the buffer before it writes rows at
///   `ring.cursor ..`) checks whether the positions about to be written hold committed
///   rows. Writing into positions that hold none needs nothing. Otherwise it performs a
///   *reservation*: it writes a slot with the buffer's `cursor`, `written` and episode
///   counters and `len = min(ring.len, capacity - window)`, where
///   `window = max(reserve_rows, rows)`: the oldest rows, which the next `window` writes
///   will overwrite, leave the committed set, so the buffer can write `window` rows
///   before the next reservation. A reservation is a store into the mapping, not a
///   disk flush: it costs well under a microsecond.
/// - [`Storage::commit`] flushes (msync) only the rows written since the previous commit
///   (at most two position ranges per column; whole columns if more than `capacity` rows
///   were written since), then writes a slot with the buffer's ring, then flushes the
///   header page. Commits flush only what changed since the last one.
/// - [`MemmapStorage::open`] returns the newest valid slot's state through
///   [`Storage::restored`].
///
/// After a crash of the process (a panic, `kill -9`, the OOM killer), the page cache keeps
/// every store the process made before it died, in program order (fences separate the row
/// stores from the slot stores). Reopening returns exactly the rows of the newest valid
/// slot: all the rows of the last commit but the oldest `window` ones at most (those a
/// later reservation dropped), plus the rows written after that commit up to the last
/// reservation. Every returned row is whole. `open` syncs the file once, so the state it
/// recovered is on disk before the buffer builds on it.
///
/// After a power loss or a kernel crash, the last commit is on disk. Reservations are
/// not flushed, though: once rows written after the last commit overwrite rows it covers,
/// those writes may reach the disk before the reservation that dropped the rows, and a
/// power loss at that moment can leave rows of the reserved window mixed. Commit before
/// stopping a run you want to keep.
///
/// **Dropping a [`MemmapStorage`] does not commit.** Rows written after the last commit
/// or reservation are then lost, exactly as after a crash.
///
/// The exclusive lock taken at create and open (`flock` on Unix) is advisory: it keeps out
/// other `MemmapStorage`s, but a process that ignores it and truncates the file makes
/// reads of the mapping fail with `SIGBUS`.
#[derive(Debug)]
pub struct MemmapStorage {
    path: PathBuf,
    schema: Schema,
    capacity: usize,
    layout: ColumnLayout,
    header_bytes: usize,
    reserve_rows: usize,
    /// Header and columns, `header_bytes + layout.total()` bytes.
    map: MmapMut,
    /// Never read: kept open because it holds the exclusive lock (released on close).
    _file: File,
    /// The state the storage was opened (or created) with.
    restored: RingState,
    /// The newest slot written, and which of the two it is.
    newest: Slot,
    newest_index: usize,
    /// The ring at the last commit (or open): rows written after it are not flushed yet.
    synced: RingState,
}

impl MemmapStorage {
    /// The plan of a memmap storage of `schema` at `capacity` rows: one [`Location::File`]
    /// line per column (with its page padding) and one for the header. The lines add up
    /// to the file's length. Nothing is allocated or created.
    ///
    /// # Errors
    /// Invalid configuration for a zero or overflowing capacity.
    pub fn plan(schema: &Schema, capacity: usize) -> Result<MemoryPlan> {
        let layout = ColumnLayout::new(schema, capacity)?;
        let header_bytes = header_bytes_for(schema_json(schema)?.len())?;
        Ok(file_plan(schema, &layout, header_bytes))
    }

    /// Creates a new file at `path` holding `capacity` empty rows of `schema`, locks it,
    /// and maps it. The file is sparse: creating a 32 GiB storage writes one header page.
    ///
    /// # Errors
    /// Invalid configuration for a zero or overflowing capacity; [`Error::Io`] if `path`
    /// already exists (this never overwrites a file: open it with
    /// [`MemmapStorage::open`]) or cannot be created, sized or mapped;
    /// [`Error::Locked`] if another writer locked the new file first.
    pub fn create(
        path: impl AsRef<Path>,
        schema: Schema,
        capacity: usize,
        options: MemmapOptions,
    ) -> Result<Self> {
        let path = path.as_ref();
        let layout = ColumnLayout::new(&schema, capacity)?;
        let json = schema_json(&schema)?;
        let header_bytes = header_bytes_for(json.len())?;
        let map_len = header_bytes.checked_add(layout.total()).ok_or_else(|| {
            Error::config(
                "capacity",
                format!("{capacity} rows make a file larger than memory can address: lower it"),
            )
        })?;
        let reserve_rows = match options.reserve_rows {
            0 => MemmapOptions::default_reserve_rows(capacity),
            n => n,
        }
        .min(capacity);

        // `File::create_new` semantics (fails if the path exists), opened read-write.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(Error::io(format!(
                "creating {} (it must not exist yet: open an existing file with \
                 MemmapStorage::open, or pick a new path)",
                path.display()
            )))?;
        let result = (|| {
            lock(&file, path)?;
            file.set_len(map_len as u64).map_err(Error::io(format!(
                "sizing {} to {map_len} bytes (is the disk full, or the file system \
                 without sparse files?)",
                path.display()
            )))?;
            let header = encode_header(&json, header_bytes, capacity, reserve_rows);
            file.write_all(&header)
                .and_then(|()| file.sync_all())
                .map_err(Error::io(format!(
                    "writing the header of {}",
                    path.display()
                )))?;
            // SAFETY: we hold the exclusive lock, so no cooperating process writes,
            // resizes or maps the file; we just sized it to `map_len`, so every mapped
            // byte is backed by the file.
            let map = unsafe { MmapOptions::new().len(map_len).map_mut(&file) }
                .map_err(Error::io(format!("mapping {}", path.display())))?;
            crate::ram::advise_huge_pages(&map);
            Ok(map)
        })();
        let map = match result {
            Ok(map) => map,
            Err(error) => {
                if !matches!(error, Error::Locked { .. }) {
                    // We created it and it is unusable: do not leave it behind.
                    let _ = std::fs::remove_file(path);
                }
                return Err(error);
            }
        };
        sync_parent_directory(path);
        let empty = Slot {
            seq: 1,
            ring: RingState::default(),
        };
        Ok(Self {
            path: path.to_path_buf(),
            schema,
            capacity,
            layout,
            header_bytes,
            reserve_rows,
            map,
            _file: file,
            restored: RingState::default(),
            newest: empty,
            newest_index: 0,
            synced: RingState::default(),
        })
    }

    /// Opens an existing file, locks it, checks its header and maps it. The buffer resumes
    /// from [`Storage::restored`]: the newest committed (or reserved) ring of the file.
    ///
    /// Everything is checked before the columns are mapped: the file's length (so no read
    /// can run past its end), magic bytes, version, checksums, schema and ring state.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be opened, read or mapped; [`Error::Locked`] if
    /// another storage has it open; [`Error::Truncated`], [`Error::BadMagic`],
    /// [`Error::UnsupportedVersion`] or [`Error::Corrupt`] for a file that is not a
    /// complete, intact storage file of this format.
    pub fn open(path: impl AsRef<Path>, options: MemmapOptions) -> Result<Self> {
        Self::open_inner(path.as_ref(), None, options)
    }

    /// As [`MemmapStorage::open`], and also checks that the file holds `schema` at
    /// `capacity` rows.
    ///
    /// # Errors
    /// As [`MemmapStorage::open`], plus [`Error::FileMismatch`] naming both layouts if the
    /// file's schema or capacity differ.
    pub fn open_with(
        path: impl AsRef<Path>,
        schema: &Schema,
        capacity: usize,
        options: MemmapOptions,
    ) -> Result<Self> {
        Self::open_inner(path.as_ref(), Some((schema, capacity)), options)
    }

    fn open_inner(
        path: &Path,
        expected: Option<(&Schema, usize)>,
        options: MemmapOptions,
    ) -> Result<Self> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(Error::io(format!("opening {}", path.display())))?;
        lock(&file, path)?;
        let header = read_header(&mut file, path)?;
        if let Some((schema, capacity)) = expected
            && (*schema != header.schema || capacity != header.capacity)
        {
            return Err(Error::FileMismatch {
                path: path.to_path_buf(),
                expected: describe(schema, capacity),
                found: describe(&header.schema, header.capacity),
            });
        }
        // Rows the crashed writer left in the page cache (a reservation may count some
        // written after its last commit) become durable before anything builds on them.
        file.sync_data()
            .map_err(Error::io(format!("syncing {}", path.display())))?;
        // SAFETY: we hold the exclusive lock, so no cooperating process writes, resizes or
        // maps the file; `read_header` checked that the file is at least `map_len` bytes
        // long, so every mapped byte is backed by the file.
        let map = unsafe { MmapOptions::new().len(header.map_len).map_mut(&file) }
            .map_err(Error::io(format!("mapping {}", path.display())))?;
        crate::ram::advise_huge_pages(&map);
        let reserve_rows = match options.reserve_rows {
            0 => header.reserve_rows,
            n => n,
        }
        .clamp(1, header.capacity);
        let ring = header.newest.ring;
        Ok(Self {
            path: path.to_path_buf(),
            schema: header.schema,
            capacity: header.capacity,
            layout: header.layout,
            header_bytes: header.header_bytes,
            reserve_rows,
            map,
            _file: file,
            restored: ring,
            newest: header.newest,
            newest_index: header.newest_index,
            synced: ring,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The reserve in effect: how many rows a reservation frees ahead of the writer (see
    /// [`MemmapOptions::reserve_rows`]).
    pub fn reserve_rows(&self) -> usize {
        self.reserve_rows
    }

    /// Checks a ring handed in by a buffer (error path only allocates).
    fn check_ring(&self, ring: &RingState) -> Result<()> {
        ring.validate(self.capacity)
    }

    /// Whether ring positions `start .. start + rows` (wrapping) hold a row committed by
    /// the newest slot.
    fn overlaps_committed(&self, start: usize, rows: usize) -> bool {
        let capacity = self.capacity;
        let committed = self.newest.ring;
        if committed.len == 0 || rows == 0 {
            return false;
        }
        let oldest = committed.oldest(capacity);
        // Two arcs of a circle meet iff one starts inside the other.
        (start + capacity - oldest) % capacity < committed.len
            || (oldest + capacity - start) % capacity < rows
    }

    /// Writes `ring` into the slot that does not hold the newest state, with the next
    /// sequence number. Stores only; the caller flushes if it needs durability.
    fn store_slot(&mut self, ring: RingState) {
        let slot = Slot {
            seq: self.newest.seq.wrapping_add(1),
            ring,
        };
        let index = 1 - self.newest_index;
        let at = SLOT_OFFSETS[index];
        let bytes = slot.encode();
        // Row stores made before this call land before the slot that commits them...
        fence(Ordering::SeqCst);
        self.map[at..at + SLOT_SUM].copy_from_slice(&bytes[..SLOT_SUM]);
        // ...and the checksum lands last, so a slot cut short by a crash is invalid.
        fence(Ordering::SeqCst);
        self.map[at + SLOT_SUM..at + SLOT_LEN].copy_from_slice(&bytes[SLOT_SUM..]);
        fence(Ordering::SeqCst);
        self.newest = slot;
        self.newest_index = index;
    }

    /// Flushes rows at ring positions `start .. start + rows` (no wrap) of every column.
    fn flush_positions(&self, start: usize, rows: usize) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        for (index, column) in self.schema.columns().iter().enumerate() {
            let row_bytes = column.row_bytes();
            let offset = self.header_bytes + self.layout.offset(index) + start * row_bytes;
            self.map
                .flush_range(offset, rows * row_bytes)
                .map_err(|source| self.flush_error(source))?;
        }
        Ok(())
    }

    /// Flushes the rows written between the last commit and `ring`.
    fn flush_written_since_sync(&self, ring: &RingState) -> Result<()> {
        let capacity = self.capacity;
        let since = self.synced;
        let fresh = ring
            .written
            .checked_sub(since.written)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n < capacity && (since.cursor + n) % capacity == ring.cursor);
        match fresh {
            Some(rows) => {
                let first = rows.min(capacity - since.cursor);
                self.flush_positions(since.cursor, first)?;
                self.flush_positions(0, rows - first)
            }
            // A full lap or more since the last commit, or a ring that does not follow
            // from it (a reset buffer): flush every column.
            None => self
                .map
                .flush_range(self.header_bytes, self.layout.total())
                .map_err(|source| self.flush_error(source)),
        }
    }

    fn flush_error(&self, source: std::io::Error) -> Error {
        Error::Io {
            context: format!(
                "flushing {} to disk (is the disk full or gone?)",
                self.path.display()
            ),
            source,
        }
    }
}

/// Makes a new file's directory entry durable. Best effort: not every platform can open
/// and sync a directory, and the file itself is already synced.
fn sync_parent_directory(path: &Path) {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if let Ok(directory) = File::open(parent) {
        let _ = directory.sync_all();
    }
}

/// Takes the exclusive lock, or says who holds it.
fn lock(file: &File, path: &Path) -> Result<()> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(Error::Locked {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(source)) => Err(Error::Io {
            context: format!("locking {}", path.display()),
            source,
        }),
    }
}

/// The header of a new file: static part, schema, slot A holding the empty ring (seq 1),
/// slot B never written.
fn encode_header(json: &[u8], header_bytes: usize, capacity: usize, reserve: usize) -> Vec<u8> {
    let mut header = vec![0u8; header_bytes];
    header[..8].copy_from_slice(&MAGIC);
    header[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    put_u64(&mut header, OFF_HEADER_BYTES, header_bytes as u64);
    put_u64(&mut header, OFF_CAPACITY, capacity as u64);
    put_u64(&mut header, OFF_RESERVE, reserve as u64);
    put_u64(&mut header, OFF_SCHEMA_LEN, json.len() as u64);
    header[OFF_SCHEMA..OFF_SCHEMA + json.len()].copy_from_slice(json);
    let sum = fnv1a(fnv1a(FNV_OFFSET, &header[..OFF_STATIC_SUM]), json);
    put_u64(&mut header, OFF_STATIC_SUM, sum);
    let empty = Slot {
        seq: 1,
        ring: RingState::default(),
    };
    header[SLOT_OFFSETS[0]..SLOT_OFFSETS[0] + SLOT_LEN].copy_from_slice(&empty.encode());
    header
}

/// Reads and checks a file's header with plain reads, before anything is mapped.
fn read_header(file: &mut File, path: &Path) -> Result<Header> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let truncated = |expected: u64, actual: u64| Error::Truncated {
        path: path.to_path_buf(),
        expected,
        actual,
    };
    let read_error = || Error::io(format!("reading the header of {}", path.display()));
    let file_len = file.metadata().map_err(read_error())?.len();

    let min_header = COLUMN_ALIGN as u64;
    if file_len < MAGIC.len() as u64 {
        return Err(truncated(min_header, file_len));
    }
    let mut fixed = [0u8; OFF_SCHEMA];
    let available = file_len.min(OFF_SCHEMA as u64) as usize;
    file.read_exact(&mut fixed[..available])
        .map_err(read_error())?;
    if fixed[..8] != MAGIC {
        return Err(Error::BadMagic {
            path: path.to_path_buf(),
        });
    }
    if file_len < min_header {
        return Err(truncated(min_header, file_len));
    }
    let mut version = [0u8; 4];
    version.copy_from_slice(&fixed[OFF_VERSION..OFF_VERSION + 4]);
    let version = u32::from_le_bytes(version);
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }

    let header_bytes = read_u64(&fixed, OFF_HEADER_BYTES);
    let schema_len = read_u64(&fixed, OFF_SCHEMA_LEN);
    if schema_len > MAX_SCHEMA_BYTES
        || !header_bytes.is_multiple_of(COLUMN_ALIGN as u64)
        || header_bytes < OFF_SCHEMA as u64 + schema_len
    {
        return Err(corrupt(format!(
            "the header claims {header_bytes} header bytes and a {schema_len}-byte schema, \
             which cannot be right: the file is damaged; restore it from a copy"
        )));
    }
    if file_len < header_bytes {
        return Err(truncated(header_bytes, file_len));
    }
    // Bounded by MAX_SCHEMA_BYTES above.
    let mut json = vec![0u8; schema_len as usize];
    file.read_exact(&mut json).map_err(read_error())?;
    let sum = fnv1a(fnv1a(FNV_OFFSET, &fixed[..OFF_STATIC_SUM]), &json);
    if sum != read_u64(&fixed, OFF_STATIC_SUM) {
        return Err(corrupt(
            "the header checksum does not match (schema or sizes damaged): restore the \
             file from a copy"
                .to_owned(),
        ));
    }

    let parsed: Schema = serde_json::from_slice(&json)
        .map_err(|e| corrupt(format!("the schema in the header does not parse: {e}")))?;
    // Deserializing skips `Schema::new`'s checks: run them.
    let schema = Schema::new(parsed.columns().iter().cloned())
        .map_err(|e| corrupt(format!("the schema in the header is invalid: {e}")))?;
    let capacity = usize::try_from(read_u64(&fixed, OFF_CAPACITY))
        .map_err(|_| corrupt("the capacity does not fit this machine's memory".to_owned()))?;
    let layout = ColumnLayout::new(&schema, capacity)
        .map_err(|e| corrupt(format!("the capacity in the header is unusable: {e}")))?;
    let header_bytes = usize::try_from(header_bytes)
        .map_err(|_| corrupt("the header does not fit this machine's memory".to_owned()))?;
    let map_len = header_bytes
        .checked_add(layout.total())
        .ok_or_else(|| corrupt("the file is larger than this machine can map".to_owned()))?;
    if file_len < map_len as u64 {
        return Err(truncated(map_len as u64, file_len));
    }
    let reserve_rows = usize::try_from(read_u64(&fixed, OFF_RESERVE))
        .unwrap_or(capacity)
        .clamp(1, capacity);

    let slots = SLOT_OFFSETS.map(|at| Slot::decode(&fixed[at..at + SLOT_LEN]));
    let (newest_index, newest) = match slots {
        [Some(a), Some(b)] if b.seq > a.seq => (1, b),
        [Some(a), _] => (0, a),
        [None, Some(b)] => (1, b),
        [None, None] => {
            return Err(corrupt(
                "both commit slots fail their checksums: restore the file from a copy".to_owned(),
            ));
        }
    };
    newest.ring.validate(capacity).map_err(|e| {
        corrupt(format!(
            "the newest commit (sequence {}) is inconsistent: {e}",
            newest.seq
        ))
    })?;
    Ok(Header {
        schema,
        capacity,
        reserve_rows,
        header_bytes,
        layout,
        map_len,
        newest,
        newest_index,
    })
}

impl Storage for MemmapStorage {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn location(&self) -> Location {
        Location::File
    }

    fn memory_plan(&self) -> MemoryPlan {
        file_plan(&self.schema, &self.layout, self.header_bytes)
    }

    fn restored(&self) -> RingState {
        self.restored
    }

    /// Performs a reservation (a header store, no disk flush) if the rows about to be
    /// written would overwrite committed rows; otherwise does nothing. Allocates nothing.
    fn prepare_write(&mut self, ring: &RingState, rows: usize) -> Result<()> {
        self.check_ring(ring)?;
        if rows > self.capacity {
            return Err(Error::config(
                "write",
                format!(
                    "of {rows} rows exceeds the capacity of {}: write in smaller chunks",
                    self.capacity
                ),
            ));
        }
        if !self.overlaps_committed(ring.cursor, rows) {
            return Ok(());
        }
        let window = self.reserve_rows.max(rows).min(self.capacity);
        let reserved = RingState {
            len: ring.len.min(self.capacity - window),
            ..*ring
        };
        self.store_slot(reserved);
        Ok(())
    }

    /// Flushes the rows written since the last commit, then writes and flushes a header
    /// slot recording `ring`. Allocates nothing.
    fn commit(&mut self, ring: &RingState) -> Result<()> {
        self.check_ring(ring)?;
        self.flush_written_since_sync(ring)?;
        self.store_slot(*ring);
        let at = SLOT_OFFSETS[self.newest_index];
        self.map
            .flush_range(at, SLOT_LEN)
            .map_err(|source| self.flush_error(source))?;
        self.synced = *ring;
        Ok(())
    }
}

impl HostStorage for MemmapStorage {
    fn column(&self, index: usize) -> &[u8] {
        let range = self.layout.range(index);
        &self.map[self.header_bytes + range.start..self.header_bytes + range.end]
    }

    fn column_mut(&mut self, index: usize) -> &mut [u8] {
        let range = self.layout.range(index);
        &mut self.map[self.header_bytes + range.start..self.header_bytes + range.end]
    }
}

#[cfg(test)]
mod tests;
