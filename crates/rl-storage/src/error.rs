//! The error type of `rl-storage`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use rl_core::DType;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong when configuring, writing, sampling, saving or opening storage.
///
/// A write that fails changes nothing already stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A shared-vocabulary error: invalid configuration, shape mismatch, over budget.
    #[error(transparent)]
    Core(#[from] rl_core::Error),

    /// No column of that name in the schema.
    #[error("no column named `{name}`: the schema has {available}")]
    UnknownColumn {
        /// The name asked for.
        name: String,
        /// The schema's column names, comma-separated.
        available: String,
    },

    /// Data of one dtype was given for a column of another.
    #[error(
        "column `{column}` holds {expected} but {actual} data was given: convert the data or fix the schema"
    )]
    DTypeMismatch {
        /// The column.
        column: String,
        /// The column's dtype.
        expected: DType,
        /// The dtype of the data given.
        actual: DType,
    },

    /// A write gave the wrong number of columns.
    #[error(
        "{actual} column slices given but the schema has {expected} columns: pass one slice per column, in schema order"
    )]
    ColumnCount {
        /// Columns in the schema.
        expected: usize,
        /// Slices given.
        actual: usize,
    },

    /// A column slice does not hold a whole number of rows, or not the same number of rows
    /// as the other columns of the write.
    #[error(
        "column `{column}` was given {elements} elements; {rows} rows of {per_row} elements ({expected}) were expected"
    )]
    RowMismatch {
        /// The column.
        column: String,
        /// Elements given.
        elements: usize,
        /// Rows the write holds (from its first column).
        rows: usize,
        /// Elements per row of this column.
        per_row: usize,
        /// Elements expected (`rows * per_row`).
        expected: usize,
    },

    /// A float value is NaN or infinite and the buffer rejects non-finite values.
    #[error(
        "column `{column}` row {row} of the write is {value}: non-finite values are rejected (fix the environment or allow them in the buffer config)"
    )]
    NonFinite {
        /// The column.
        column: String,
        /// Row within the write.
        row: usize,
        /// The value.
        value: f32,
    },

    /// Sampling from a buffer that holds no rows.
    #[error("cannot sample from an empty buffer: write rows first")]
    Empty,

    /// A request needs more rows than the buffer holds.
    #[error(
        "{requested} rows requested but only {available} are available: lower the batch size or collect more data"
    )]
    NotEnoughRows {
        /// Rows asked for.
        requested: usize,
        /// Rows available.
        available: usize,
    },

    /// More rows were asked of a sampler than the batch (or output slices) it fills has
    /// room for.
    #[error(
        "{requested} rows requested but the batch has room for {room}: sample at most {room} rows, or allocate the batch for {requested} (Batch::new(schema, {requested}))"
    )]
    BatchTooSmall {
        /// Rows asked for.
        requested: usize,
        /// Rows the batch holds.
        room: usize,
    },

    /// A rollout buffer already holds all its steps.
    #[error(
        "the rollout buffer is full ({steps} steps of {envs} environments): train on it, then clear() before pushing the next step"
    )]
    RolloutFull {
        /// Steps per rollout.
        steps: usize,
        /// Environments per step.
        envs: usize,
    },

    /// A rollout buffer is read in minibatches before it holds all its steps.
    #[error(
        "the rollout buffer holds {pushed} of its {steps} steps: push the remaining steps first"
    )]
    RolloutNotFull {
        /// Steps pushed so far.
        pushed: usize,
        /// Steps per rollout.
        steps: usize,
    },

    /// A batch's schema differs from the buffer's.
    #[error(
        "the batch was made for another schema: create it with Batch::new(buffer.schema(), rows)"
    )]
    BatchSchema,

    /// A file is shorter than its header says.
    #[error(
        "{path}: file is {actual} bytes but its header needs {expected}: the file was truncated; restore it or create a new one"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the header needs.
        expected: u64,
        /// Bytes on disk.
        actual: u64,
    },

    /// A file does not start with this crate's magic bytes.
    #[error("{path}: not an rl-storage file (wrong magic bytes)")]
    BadMagic {
        /// The file.
        path: PathBuf,
    },

    /// A file was written by an unsupported format version.
    #[error(
        "{path}: format version {found} is not supported (this build reads version {supported}): convert the file or use a matching rl-storage"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },

    /// A file's schema or capacity differs from the one asked for.
    #[error(
        "{path}: the file holds {found} but {expected} was asked for: open it with its own schema or create a new file"
    )]
    FileMismatch {
        /// The file.
        path: PathBuf,
        /// What was asked for.
        expected: String,
        /// What the file holds.
        found: String,
    },

    /// A checkpoint's sampler state was saved by a sampler of another kind, or built
    /// otherwise (another capacity, window length, ...), than the one it is loaded into.
    #[error(
        "{path}: the checkpoint holds {found} but it is loaded into {expected}: load it with a sampler built like the one that saved it"
    )]
    SamplerMismatch {
        /// The sampler file.
        path: PathBuf,
        /// The sampler loading it.
        expected: String,
        /// What the file holds.
        found: String,
    },

    /// Another storage holds the file's lock: a writer excludes every other storage, a
    /// read-only storage excludes writers.
    #[error(
        "{path}: another storage has the file open (it is locked): close it first; to inspect or sample a file another process has finished writing, open it with MemmapStorage::open_read_only"
    )]
    Locked {
        /// The file.
        path: PathBuf,
    },

    /// A strict open ([`Fallback::Refuse`](crate::memmap::Fallback::Refuse)) found a
    /// commit slot unusable: the state in force may be older than the last commit.
    #[error(
        "{path}: {damaged}; the other slot holds an older state (sequence {sequence}, {rows} rows): open without Fallback::Refuse to continue from it, or restore the file from a copy"
    )]
    Fallback {
        /// The file.
        path: PathBuf,
        /// The unusable slot and why.
        damaged: String,
        /// Sequence number of the valid slot.
        sequence: u64,
        /// Rows the valid slot holds.
        rows: usize,
    },

    /// A write or commit to a storage opened read-only.
    #[error(
        "{path} was opened read-only: nothing can be written or committed; open it with MemmapStorage::open to write"
    )]
    ReadOnly {
        /// The file.
        path: PathBuf,
    },

    /// A file's metadata is damaged.
    #[error("{path}: corrupt file: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is damaged.
        reason: String,
    },

    /// The file system has no room for a new file's blocks, or the disk quota is spent
    /// (`ENOSPC`, `EDQUOT`).
    ///
    /// [`MemmapStorage::create`](crate::memmap::MemmapStorage::create) reserves every
    /// block of its file up front (and [`MemmapStorage::open`](crate::memmap::MemmapStorage::open)
    /// the blocks a file lacks), so a full disk is this error then, never a `SIGBUS` when
    /// a row is written later. Where the file system cannot reserve blocks (it refuses
    /// `fallocate`: some network and older file systems; or the platform is not Linux),
    /// the file is sized sparse instead and this check cannot be made: a write may then
    /// still meet a full disk.
    #[error(
        "{path}: the file needs {needed} bytes and the file system has no room for them ({source}): free space there, lower the capacity, or put the file in another folder"
    )]
    NoSpace {
        /// The file.
        path: PathBuf,
        /// Bytes the file needs.
        needed: u64,
        /// The operating system's error: no space left, or a spent quota.
        #[source]
        source: std::io::Error,
    },

    /// An operating-system I/O call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// CUDA was asked for but this build has no CUDA support.
    #[error(
        "this build of rl-storage has no CUDA support: enable the `cuda` feature (`rl-storage/cuda` or `rl/cuda`), or use Device::Cpu, which needs no GPU"
    )]
    CudaNotCompiled,

    /// CUDA was asked for but cannot be used on this machine (no NVIDIA driver).
    #[error("CUDA is unavailable: {reason}; the CPU path needs no GPU: use Device::Cpu")]
    CudaUnavailable {
        /// What is missing and how to provide it.
        reason: String,
    },

    /// The CUDA driver was found but a request to it failed (or was refused before reaching
    /// it, such as an ordinal the driver cannot represent).
    #[error(
        "{operation} on {} failed: {code} ({message}): {hint}",
        .ordinal.map_or_else(|| "the CUDA driver".to_owned(), |o| format!("cuda:{o}"))
    )]
    CudaDriver {
        /// The device's ordinal, when the request concerned one device.
        ordinal: Option<u32>,
        /// What was being done, e.g. `opening the device`.
        operation: &'static str,
        /// The error code, as the driver names it, e.g. `CUDA_ERROR_INVALID_DEVICE`.
        code: String,
        /// The description of the error (the driver's, when it gave one).
        message: String,
        /// What to check or change.
        hint: &'static str,
    },
}

impl Error {
    /// Shorthand for an invalid-configuration error.
    pub(crate) fn config(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Core(rl_core::Error::config(what, problem))
    }

    /// Shorthand for an I/O error with context.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    /// As [`Error::io`], but a full disk or a spent quota is [`Error::NoSpace`], naming
    /// the file at `path` and the `needed` bytes.
    pub(crate) fn io_or_no_space(
        context: impl Into<String>,
        path: &Path,
        needed: u64,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        let path = path.to_path_buf();
        move |source| match source.kind() {
            ErrorKind::StorageFull | ErrorKind::QuotaExceeded => Error::NoSpace {
                path,
                needed,
                source,
            },
            _ => Error::Io { context, source },
        }
    }
}
