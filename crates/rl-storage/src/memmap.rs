//! Storage in one memory-mapped file, with commits that survive a crash of the process.
//!
//! A [`MemmapStorage`] keeps every column of a buffer in a single file: a header, then the
//! columns laid out by `ColumnLayout` (each column page-aligned). Creating the file
//! reserves its disk blocks without writing them, so a full disk is an error then, never
//! a `SIGBUS` later; a 32 GiB buffer costs its disk space at once but no RAM until rows
//! are written, and the page cache holds what is hot. The storage is a [`HostStorage`]:
//! the write and gather paths read and write the mapped column bytes directly.
//!
//! The file format, the commit contract and the crash protocol are documented on
//! [`MemmapStorage`]; [`Recovery`] is what opening a file recovered.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{Ordering, fence};

use memmap2::{MmapMut, MmapOptions};
use rl_core::{Location, MemoryPlan, Schema};

use crate::error::{Error, Result};
use crate::ram::plan_of;
use crate::storage::{ColumnLayout, HostStorage, RingState, Storage};

mod header;

use header::{
    FRESH_NEWEST, FRESH_SLOTS, Header, SLOT_LEN, SLOT_OFFSETS, SLOT_SUM, Slot, encode_header,
    header_bytes_for, read_header, schema_json,
};
pub use header::{Fallback, Recovery, SlotDamage, SlotFallback};

/// How a [`MemmapStorage`] is opened.
///
/// ```
/// use rl_storage::memmap::{Fallback, MemmapOptions};
///
/// let lenient = MemmapOptions::default(); // a fallback is reported, not refused
/// let strict = MemmapOptions { fallback: Fallback::Refuse };
/// assert_ne!(lenient, strict);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemmapOptions {
    /// What `open` does when one commit slot is unusable (see [`Recovery`]): report it
    /// (the default) or refuse to open (a strict open). Ignored by `create`.
    pub fallback: Fallback,
}

/// Whether a storage may write its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Created or opened for writing: exclusive lock, shared mapping.
    Write,
    /// Opened with [`MemmapStorage::open_read_only`]: shared lock, private mapping.
    Read,
}

/// Schema and capacity in words, for mismatch errors: `capacity 100, columns obs f32[3], done bool`.
fn describe(schema: &Schema, capacity: usize) -> String {
    use std::fmt::Write as _;
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

/// Columns in one memory-mapped file that survives the process: commits are crash-safe,
/// and reopening the file gives back the last committed ring.
///
/// The file's blocks are reserved when it is created (see [`MemmapStorage::create`]) but
/// never written or pre-faulted: its planned bytes are file bytes ([`Location::File`]),
/// paged in as rows are touched. A storage that writes holds an exclusive lock on the
/// file for as long as it lives; [`MemmapStorage::open_read_only`] takes a shared one.
///
/// # The commit contract
///
/// **After [`Storage::commit`] returns, a crash of the process (a panic, `kill -9`, the
/// OOM killer) loses no committed row except rows the writer has since overwritten in
/// ring order.** Reopening returns every committed row that no later write reached,
/// whole, plus the rows written after the commit up to the last write that began (the
/// buffer's state as the header last recorded it). Nothing else about the crash
/// matters: when it struck, how many commits came before, whether the ring was
/// wrapping.
///
/// **Dropping the storage does not commit.** Rows written after the last commit may be
/// lost, exactly as after a crash: call `commit` before dropping a storage whose rows
/// you want to keep.
///
/// ```
/// use rl_core::{Column, DType, Field, Schema};
/// use rl_storage::{storage::{HostStorage, RingState, Storage}, memmap::{MemmapOptions, MemmapStorage}};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("replay.rlmm");
/// let schema = Schema::new([Column::scalar(Field::Reward.name(), DType::F32)])?;
/// let mut storage = MemmapStorage::create(&path, schema, 100, MemmapOptions::default())?;
/// let ring = RingState { cursor: 1, len: 1, written: 1, ..RingState::default() };
/// storage.prepare_write(&RingState::default(), 1)?;
/// storage.column_mut(0)[..4].copy_from_slice(&1.5f32.to_le_bytes());
/// storage.commit(&ring)?;
/// drop(storage);
///
/// let storage = MemmapStorage::open(&path, MemmapOptions::default())?;
/// assert_eq!(storage.restored(), ring);
/// assert_eq!(storage.recovery().fallback, None); // nothing damaged, nothing lost
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
/// | 16 | 8 | header bytes `H` (`u64`, 192 + `S` rounded up to 4096): the columns start at `H` |
/// | 24 | 8 | capacity in rows (`u64`) |
/// | 32 | 8 | unused: written as 0 (files written before per-write reservations hold their reserve window), ignored |
/// | 40 | 8 | length `S` of the schema JSON (`u64`, at most 16 MiB) |
/// | 48 | 8 | static checksum: FNV-1a-64 over bytes 0..48, then the schema JSON |
/// | 56 | 8 | reserved, zero |
/// | 64 | 64 | commit slot A |
/// | 128 | 64 | commit slot B |
/// | 192 | `S` | the [`Schema`] as JSON (serde) |
/// | 192 + `S` | .. | zeros up to `H` |
/// | `H` | layout total | the columns, at `H +` `ColumnLayout::offset` |
///
/// A commit slot (64 bytes) holds six `u64`: a sequence number (never 0), then the
/// [`RingState`] fields `cursor`, `len`, `written`, `episodes`, `episode_start`; then 8
/// reserved zero bytes and, at slot offset 56, an FNV-1a-64 checksum over slot bytes
/// 0..56. A slot is valid when its checksum matches and its sequence number is not 0.
/// The file's state is the valid slot with the highest sequence number; a header update
/// always writes the *other* slot, with the next sequence number, so a write torn by a
/// crash fails its checksum and the previous state stays in force. A new file holds the
/// empty ring in both slots, at sequences 1 (A) and 2 (B), so a slot of 64 zero bytes
/// was erased: it is reported like any other unusable slot. (Files created by earlier
/// versions held only slot A until their first commit; if never committed, they open
/// with that report and lose nothing.)
///
/// Every byte of the header is checked before anything is mapped: the static checksum
/// before any size is believed (a damaged size is damage, not a truncation), the
/// reserved bytes and the padding are zero, the file is as long as the header says,
/// and a slot that fails its checks is reported ([`Recovery::fallback`]) or refused
/// ([`Fallback::Refuse`]), never skipped silently.
///
/// # Crash safety
///
/// The rows of the file are the `len` ring positions before `cursor` in the slot in
/// force (its *committed rows*). The storage keeps one invariant: **no committed row is
/// overwritten before a header update has removed it from the committed set, and a
/// header update removes only the rows the write that follows overwrites.**
///
/// - [`Storage::prepare_write`] (called by the buffer before it writes `rows` rows at
///   `ring.cursor ..`) checks whether those positions hold committed rows. Writing into
///   positions that hold none (the first lap) needs nothing. Otherwise it makes a
///   *reservation*: it writes a slot with the buffer's `cursor`, `written` and episode
///   counters and `len = min(ring.len, capacity - rows)`: exactly the rows the write
///   overwrites leave the committed set, every other row stays (including the rows
///   written since the last commit). A reservation is a store into the mapping, not a
///   disk flush: well under a microsecond, once per write.
/// - [`Storage::commit`] flushes (msync) only the rows written since the previous commit
///   (at most two position ranges per column; whole columns if more than `capacity` rows
///   were written since), then writes a slot with the buffer's ring, then flushes the
///   header page.
/// - [`MemmapStorage::open`] returns the slot in force through [`Storage::restored`] and
///   the whole story through [`MemmapStorage::recovery`].
///
/// After a crash of the process, the page cache keeps every store the process made
/// before it died, in program order (fences separate the row stores from the slot
/// stores). Reopening returns exactly the rows of the slot in force, every one whole.
/// `open` syncs the file once, so the state it recovered is on disk before the buffer
/// builds on it.
///
/// [`MemmapStorage::create`] is atomic: it writes the new file under a temporary name
/// in the same directory, syncs it, and only then links it to its path. A crash leaves
/// either no file at the path or a valid empty one (and at most a temporary file, which
/// the next `create` of that path removes).
///
/// After a power loss or a kernel crash, the last commit's rows and header are on disk.
/// Reservations are not flushed, though: once rows written after the last commit
/// overwrite rows it covers, those writes may reach the disk before the reservation
/// that dropped the rows, and a power loss at that moment can leave rows of that write
/// mixed. Commit before stopping a run you want to keep.
///
/// The locks (`flock` on Unix) are advisory: they keep out other `MemmapStorage`s, but
/// a process that ignores them and truncates the file makes reads of the mapping fail
/// with `SIGBUS`.
#[derive(Debug)]
pub struct MemmapStorage {
    path: PathBuf,
    schema: Schema,
    capacity: usize,
    layout: ColumnLayout,
    header_bytes: usize,
    /// Header and columns, `header_bytes + layout.total()` bytes: shared with the file
    /// when writing, private copy-on-write pages when read-only.
    map: MmapMut,
    access: Access,
    /// Holds the lock (released on close); sampled rows are read from it
    /// ([`HostStorage::read_column`]).
    file: File,
    /// What opening (or creating) the file found (boxed: read rarely, and it would make
    /// the storage, which buffers hold by value, a third larger).
    recovery: Box<Recovery>,
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
    /// and maps it.
    ///
    /// Every block of the file is reserved (`fallocate` on Linux) but not written:
    /// creating a 32 GiB storage writes one header page and takes 32 GiB of the disk at
    /// once, so a disk too small for the file is [`Error::NoSpace`] here, never a
    /// `SIGBUS` when a row is written later. Where the file system cannot reserve
    /// blocks (it refuses `fallocate`, as some network file systems do) and on other
    /// platforms than Linux, the file is created sparse instead, without an error: it
    /// then takes disk space as rows are written, and a write that meets a full disk
    /// kills the process with `SIGBUS`. On copy-on-write file systems (btrfs) a
    /// reservation covers each block's first write only.
    ///
    /// Atomic: the file is written and synced under a temporary name in the same
    /// directory (`.NAME.rlmm-tmp-PID`), then linked to `path`, so a crash leaves either
    /// no file at `path` or a valid empty one. Temporary files that a crashed `create` of
    /// the same path left behind (and no process holds) are removed first.
    ///
    /// A failed `create` leaves nothing behind: no file at `path` and no temporary file.
    ///
    /// # Errors
    /// Invalid configuration for a zero or overflowing capacity or a path without a file
    /// name; [`Error::NoSpace`] if the disk (or the disk quota) has no room for the
    /// file's [`MemmapStorage::plan`] bytes; [`Error::Io`] if `path` already exists (this
    /// never overwrites a file: open it with [`MemmapStorage::open`]) or cannot be
    /// created, sized or mapped.
    pub fn create(
        path: impl AsRef<Path>,
        schema: Schema,
        capacity: usize,
        options: MemmapOptions,
    ) -> Result<Self> {
        let _ = options; // nothing to choose at create yet
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
        let exists = || {
            Error::io(format!(
                "creating {} (it must not exist yet: open an existing file with \
                 MemmapStorage::open, or pick a new path)",
                path.display()
            ))(std::io::Error::from(std::io::ErrorKind::AlreadyExists))
        };
        if path.symlink_metadata().is_ok() {
            return Err(exists());
        }
        let (directory, temp) = temp_path(path)?;
        remove_stale_temps(&directory, &temp);

        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(Error::io(format!(
                "creating the temporary file {} (is the directory writable?)",
                temp.display()
            )))?;
        let result = (|| {
            lock(&file, &temp, Access::Write)?;
            let needed = map_len as u64;
            file.set_len(needed)
                .and_then(|()| reserve_blocks(&file, needed))
                .map_err(Error::io_or_no_space(
                    format!("sizing {} to {map_len} bytes", path.display()),
                    path,
                    needed,
                ))?;
            let header = encode_header(&json, header_bytes, capacity);
            file.write_all(&header)
                .and_then(|()| file.sync_all())
                .map_err(Error::io_or_no_space(
                    format!("writing the header of {}", path.display()),
                    path,
                    needed,
                ))?;
            publish(&temp, path).map_err(|source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    exists()
                } else {
                    Error::io(format!(
                        "moving the new file {} to {}",
                        temp.display(),
                        path.display()
                    ))(source)
                }
            })?;
            // SAFETY: we hold the exclusive lock, so no cooperating process writes,
            // resizes or maps the file; we just sized it to `map_len`, so every mapped
            // byte is backed by the file.
            let map = unsafe { MmapOptions::new().len(map_len).map_mut(&file) }
                .map_err(Error::io(format!("mapping {}", path.display())))?;
            crate::ram::advise_huge_pages(&map);
            Ok(map)
        })();
        // The temporary name goes in every case: after `publish` the file lives at
        // `path`; before it, the file is unusable.
        let _ = std::fs::remove_file(&temp);
        let map = match result {
            Ok(map) => map,
            Err(error) => {
                if !matches!(&error, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
                    && same_file(&file, path)
                {
                    // Published but not mappable: do not leave an unusable file behind.
                    let _ = std::fs::remove_file(path);
                }
                return Err(error);
            }
        };
        sync_directory(&directory);
        Ok(Self {
            path: path.to_path_buf(),
            schema,
            capacity,
            layout,
            header_bytes,
            map,
            access: Access::Write,
            file,
            recovery: Box::new(Recovery::fresh()),
            newest: FRESH_SLOTS[FRESH_NEWEST],
            newest_index: FRESH_NEWEST,
            synced: RingState::default(),
        })
    }

    /// Opens an existing file for writing, locks it, checks its header and maps it. The
    /// buffer resumes from [`Storage::restored`]: the newest state the header recorded
    /// (the last commit, or a later reservation); [`MemmapStorage::recovery`] says what
    /// was recovered and whether a slot was unusable.
    ///
    /// Everything is checked before the columns are mapped: the file's length (so no read
    /// can run past its end), magic bytes, version, checksums, reserved bytes, schema and
    /// ring state. Blocks the file lacks (a sparse copy, or a file from an older version
    /// or a file system that could not reserve) are reserved as by
    /// [`MemmapStorage::create`], so a full disk is an error here, not a `SIGBUS` later;
    /// where blocks cannot be reserved, the file is opened as it is.
    ///
    /// # Errors
    /// [`Error::NoSpace`] if the disk has no room for the blocks the file lacks (nothing
    /// in the file changes); [`Error::Io`] if the file cannot be opened, read or mapped;
    /// [`Error::Locked`] if another storage has it open; [`Error::Truncated`], [`Error::BadMagic`],
    /// [`Error::UnsupportedVersion`] or [`Error::Corrupt`] for a file that is not a
    /// complete, intact storage file of this format; [`Error::Fallback`] if a commit
    /// slot is unusable and `options.fallback` is [`Fallback::Refuse`].
    pub fn open(path: impl AsRef<Path>, options: MemmapOptions) -> Result<Self> {
        Self::open_inner(path.as_ref(), None, options, Access::Write)
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
        Self::open_inner(
            path.as_ref(),
            Some((schema, capacity)),
            options,
            Access::Write,
        )
    }

    /// Opens an existing file for reading only: to inspect or sample a buffer another
    /// process has finished with. Takes a shared lock (other readers may open the file
    /// too; a writer may not while this storage lives), never writes the file, and works
    /// on a read-only file or mount. The same checks and [`MemmapStorage::recovery`] as
    /// [`MemmapStorage::open`].
    ///
    /// [`Storage::prepare_write`] and [`Storage::commit`] fail with
    /// [`Error::ReadOnly`], so a buffer over this storage samples but refuses writes.
    /// [`HostStorage::column_mut`] gives private copy-on-write pages: what is written
    /// there stays in this process and never reaches the file.
    ///
    /// ```
    /// use rl_core::{Column, DType, Field, Schema};
    /// use rl_storage::{ColumnSlice, Batch, Error, memmap::{MemmapOptions, MemmapStorage}, replay::ReplayBuffer, sampler::Uniform};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("done.rlmm");
    /// let schema = Schema::new([Column::scalar(Field::Reward.name(), DType::F32)])?;
    /// let storage = MemmapStorage::create(&path, schema.clone(), 100, MemmapOptions::default())?;
    /// let mut buffer = ReplayBuffer::new(storage, Uniform::new(0));
    /// buffer.extend(&[ColumnSlice::from(&[1.0f32, 2.0, 3.0])])?;
    /// buffer.commit()?;
    /// drop(buffer);
    ///
    /// let reader = MemmapStorage::open_read_only(&path, MemmapOptions::default())?;
    /// let mut buffer = ReplayBuffer::new(reader, Uniform::new(0));
    /// let mut batch = Batch::new(&schema, 8)?;
    /// buffer.sample(&mut batch)?;
    /// assert_eq!(batch.len(), 8);
    /// let refused = buffer.extend(&[ColumnSlice::from(&[4.0f32])]);
    /// assert!(matches!(refused, Err(Error::ReadOnly { .. })));
    /// assert_eq!(buffer.len(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`MemmapStorage::open`] but never [`Error::NoSpace`] (it reserves nothing);
    /// [`Error::Locked`] while a writer has the file open.
    pub fn open_read_only(path: impl AsRef<Path>, options: MemmapOptions) -> Result<Self> {
        Self::open_inner(path.as_ref(), None, options, Access::Read)
    }

    fn open_inner(
        path: &Path,
        expected: Option<(&Schema, usize)>,
        options: MemmapOptions,
        access: Access,
    ) -> Result<Self> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(access == Access::Write)
            .open(path)
            .map_err(Error::io(format!("opening {}", path.display())))?;
        lock(&file, path, access)?;
        let header: Header = read_header(&mut file, path, options.fallback)?;
        if let Some((schema, capacity)) = expected
            && (*schema != header.schema || capacity != header.capacity)
        {
            return Err(Error::FileMismatch {
                path: path.to_path_buf(),
                expected: describe(schema, capacity),
                found: describe(&header.schema, header.capacity),
            });
        }
        let map = match access {
            Access::Write => {
                // A file sized sparse (copied by a tool that keeps holes, or created where
                // blocks could not be reserved) gets the blocks it lacks now, so that no
                // write into the mapping meets a full disk. Rows stay as they are.
                let needed = header.map_len as u64;
                reserve_blocks(&file, needed).map_err(Error::io_or_no_space(
                    format!("reserving the blocks of {}", path.display()),
                    path,
                    needed,
                ))?;
                // Rows the crashed writer left in the page cache (a reservation may count
                // some written after its last commit) become durable before anything
                // builds on them.
                file.sync_data()
                    .map_err(Error::io(format!("syncing {}", path.display())))?;
                // SAFETY: we hold the exclusive lock, so no cooperating process writes,
                // resizes or maps the file; `read_header` checked that the file is at
                // least `map_len` bytes long, so every mapped byte is backed by the file.
                unsafe { MmapOptions::new().len(header.map_len).map_mut(&file) }
            }
            // SAFETY: we hold a shared lock, so no cooperating process writes or resizes
            // the file; `read_header` checked its length covers `map_len`. The mapping is
            // private (copy-on-write, no swap reserved): nothing reaches the file.
            Access::Read => unsafe {
                MmapOptions::new()
                    .len(header.map_len)
                    .no_reserve_swap()
                    .map_copy(&file)
            },
        }
        .map_err(Error::io(format!("mapping {}", path.display())))?;
        crate::ram::advise_huge_pages(&map);
        let ring = header.newest.ring;
        Ok(Self {
            path: path.to_path_buf(),
            schema: header.schema,
            capacity: header.capacity,
            layout: header.layout,
            header_bytes: header.header_bytes,
            map,
            access,
            file,
            recovery: Box::new(header.recovery),
            newest: header.newest,
            newest_index: header.newest_index,
            synced: ring,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What opening the file recovered: the sequence number and ring in force, the rows
    /// it holds, and whether a commit slot was unusable (and why). For a new file:
    /// sequence 1, no rows, no fallback.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Whether this storage was opened with [`MemmapStorage::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.access == Access::Read
    }

    /// Checks a ring handed in by a buffer, and that this storage may write (error path
    /// only allocates).
    fn check_write(&self, ring: &RingState) -> Result<()> {
        if self.access == Access::Read {
            return Err(Error::ReadOnly {
                path: self.path.clone(),
            });
        }
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
        // Row stores of the write that follows land after the slot.
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

/// Allocates every block of the first `len` bytes of `file` (not beyond its length) that
/// has none, writing nothing: from then on no store into a mapping of the file can meet
/// a full disk, which would kill the process with `SIGBUS`. Bytes already there stay.
///
/// The `fallocate` system call itself, not glibc's `posix_fallocate`, which writes a
/// byte into every block where the file system cannot reserve (minutes for a large
/// file over a network). Where it cannot (`EOPNOTSUPP`, or `EINVAL` from some file
/// systems; `ENOSYS`), the file stays as it is: sparse. A full disk is `ENOSPC`
/// (`EDQUOT` for a spent quota), which may leave some blocks allocated but changes no
/// byte of the file: `create` removes it, `open` leaves it as it was.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn reserve_blocks(file: &File, len: u64) -> std::io::Result<()> {
    use rustix::fs::{FallocateFlags, fallocate};
    use rustix::io::Errno;
    loop {
        match fallocate(file, FallocateFlags::empty(), 0, len) {
            Err(Errno::INTR) => {} // a signal arrived: try again
            Ok(()) | Err(Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => return Ok(()),
            Err(errno) => return Err(errno.into()),
        }
    }
}

/// Off Linux, files stay sparse (see the Linux version).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn reserve_blocks(_file: &File, _len: u64) -> std::io::Result<()> {
    Ok(())
}

/// The directory of `path` and the temporary name `create` writes the file under.
fn temp_path(path: &Path) -> Result<(PathBuf, PathBuf)> {
    let name = path.file_name().ok_or_else(|| {
        Error::config(
            format!("path {}", path.display()),
            "has no file name: name the file to create",
        )
    })?;
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut temp = temp_prefix(name);
    temp.push(std::process::id().to_string());
    Ok((directory.clone(), directory.join(temp)))
}

/// `.NAME.rlmm-tmp-`: the start of every temporary name for a file called `NAME`.
fn temp_prefix(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".rlmm-tmp-");
    prefix
}

/// Removes the temporary files of earlier `create`s of the same path that no process
/// holds (their creator crashed). A temporary file still locked belongs to a `create`
/// in progress and stays. Best effort.
fn remove_stale_temps(directory: &Path, temp: &Path) {
    let Some(prefix) = temp.file_name().and_then(|name| {
        let name = name.to_str()?;
        Some(name[..name.rfind('-')? + 1].to_owned())
    }) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(directory) else {
        return;
    };
    for entry in entries.flatten() {
        let is_temp = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(&prefix));
        if !is_temp {
            continue;
        }
        let stale = entry.path();
        if let Ok(file) = OpenOptions::new().read(true).write(true).open(&stale)
            && file.try_lock().is_ok()
        {
            let _ = std::fs::remove_file(&stale);
        }
    }
}

/// Gives the synced temporary file its final name without ever replacing a file there:
/// a hard link (fails if `path` exists), or, on file systems without hard links, a
/// rename after checking that `path` does not exist.
fn publish(temp: &Path, path: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(temp, path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Err(error),
        Err(_) => {
            if path.symlink_metadata().is_ok() {
                return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
            }
            std::fs::rename(temp, path)
        }
    }
}

/// Whether `path` names the file `file` is open on.
#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &File, _path: &Path) -> bool {
    false
}

/// Makes a directory's entries durable. Best effort: not every platform can open and
/// sync a directory, and the file itself is already synced.
fn sync_directory(directory: &Path) {
    if let Ok(directory) = File::open(directory) {
        let _ = directory.sync_all();
    }
}

/// Takes the lock `access` needs (exclusive to write, shared to read), or says who
/// holds it.
fn lock(file: &File, path: &Path, access: Access) -> Result<()> {
    let taken = match access {
        Access::Write => file.try_lock(),
        Access::Read => file.try_lock_shared(),
    };
    match taken {
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
        self.recovery.ring
    }

    /// Makes a reservation (a header store, no disk flush) if the rows about to be
    /// written would overwrite committed rows: exactly those rows leave the committed
    /// set. Otherwise does nothing. Allocates nothing.
    fn prepare_write(&mut self, ring: &RingState, rows: usize) -> Result<()> {
        self.check_write(ring)?;
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
        let reserved = RingState {
            len: ring.len.min(self.capacity - rows),
            ..*ring
        };
        self.store_slot(reserved);
        Ok(())
    }

    /// Flushes the rows written since the last commit, then writes and flushes a header
    /// slot recording `ring`. Allocates nothing.
    fn commit(&mut self, ring: &RingState) -> Result<()> {
        self.check_write(ring)?;
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

impl MemmapStorage {
    /// Unmaps the file's pages from this process (`madvise(MADV_DONTNEED)` over the
    /// whole mapping): they leave its resident set, and stay in the page cache and the
    /// file, so nothing stored changes and the next access maps them again (a minor
    /// fault). Rows written and not yet committed stay dirty in the page cache and the
    /// next commit flushes them as before. A buffer that writes and samples a file much
    /// larger than RAM calls this now and then to keep its resident memory bounded by
    /// what it touched since the last call.
    ///
    /// # Errors
    /// The system call's error.
    pub fn release_pages(&self) -> Result<()> {
        #[cfg(unix)]
        // SAFETY: a writable storage maps the file shared, so dropping its pages loses
        // nothing (dirty pages stay dirty in the page cache, and reads map them again
        // with the same bytes); a read-only storage never writes its private mapping, so
        // its pages equal the file's. Slices borrowed from the mapping stay valid: the
        // range stays mapped, only its pages are faulted in again.
        unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
                .map_err(Error::io(format!(
                    "releasing the pages of {}",
                    self.path.display()
                )))?;
        }
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

    /// Reads the file (`pread`): the page cache holds what the mapping wrote, and nothing
    /// is mapped into the process. Falls back to the mapping if the read fails (where
    /// the mapping would meet the same I/O error as `SIGBUS`).
    fn read_column(&self, index: usize, offset: usize, out: &mut [u8]) {
        let range = self.layout.range(index);
        assert!(
            offset + out.len() <= range.len(),
            "read of {} bytes at {offset} leaves column {index} ({} bytes)",
            out.len(),
            range.len()
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            let at = (self.header_bytes + range.start + offset) as u64;
            if self.file.read_exact_at(out, at).is_ok() {
                return;
            }
        }
        out.copy_from_slice(&self.column(index)[offset..offset + out.len()]);
    }

    fn reads_by_copy(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
