//! Samplers' state in checkpoints: the file format of `sampler.bin`, and the typed
//! writer and reader a sampler saves and restores its state through.
//!
//! A sampler's draws depend on more than the rows: its generator, and for some samplers
//! per-row state (priorities) or a position in an epoch. [`crate::replay::ReplayBuffer::save`]
//! writes that state next to the rows, through [`crate::sampler::Sampler::save_state`], so that a
//! loaded buffer draws exactly what the saved one would have drawn next.
//!
//! Layout of `sampler.bin` (little-endian):
//!
//! | bytes | field |
//! | --- | --- |
//! | 8 | magic `RLSAMPLR` |
//! | 4 | file format version (1) |
//! | 4 | the sampler's state version ([`StateFormat::version`]) |
//! | 8 | payload bytes |
//! | 8 | FNV-1a 64 checksum of the payload |
//! | 4 | length of the sampler's kind, 1 to 64 bytes |
//! | k | the kind ([`StateFormat::kind`]), UTF-8 |
//! | n | the payload: what [`crate::sampler::Sampler::save_state`] wrote |
//!
//! Loading checks the header, the file's length and the checksum before the sampler reads
//! a byte, and that the sampler read the whole payload after.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use rand_xoshiro::Xoshiro256PlusPlus;

use crate::error::{Error, Result};
use crate::sampler::Sampler;
use crate::storage::RingState;

/// Name of the sampler's file in a checkpoint directory.
pub(crate) const SAMPLER_FILE: &str = "sampler.bin";

const MAGIC: &[u8; 8] = b"RLSAMPLR";
const FILE_VERSION: u32 = 1;
/// Bytes of the fixed part of the header (before the kind).
const FIXED_HEADER: usize = 36;
/// Offset of the payload length (patched once the payload is written).
const LENGTH_OFFSET: u64 = 16;
/// Longest kind name.
const MAX_KIND: usize = 64;
/// Elements converted per write or read of a slice (bounded stack buffer).
const CHUNK: usize = 512;

/// Names the state a sampler saves: which sampler wrote it, and the layout's version.
///
/// Loading refuses a state of another kind ([`Error::SamplerMismatch`]) or another
/// version ([`Error::UnsupportedVersion`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateFormat {
    /// The sampler, e.g. `"prioritized"`: 1 to 64 bytes of UTF-8.
    pub kind: &'static str,
    /// The layout of the payload; raise it when the layout changes.
    pub version: u32,
}

/// FNV-1a, 64 bits: enough to tell a damaged file from a whole one.
#[derive(Clone, Copy, Debug)]
struct Checksum(u64);

impl Checksum {
    fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn update(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Where a sampler writes its state ([`crate::sampler::Sampler::save_state`]): numbers, in
/// little-endian order, streamed to the checkpoint's sampler file without a copy of the
/// state in memory.
pub struct StateWriter<'a> {
    out: &'a mut dyn Write,
    path: &'a Path,
    bytes: u64,
    checksum: Checksum,
}

impl std::fmt::Debug for StateWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateWriter")
            .field("path", &self.path)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl StateWriter<'_> {
    /// Writes raw bytes.
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(Error::io(format!(
            "writing the sampler state to {}",
            self.path.display()
        )))?;
        self.checksum.update(bytes);
        self.bytes += bytes.len() as u64;
        Ok(())
    }

    /// Writes a `u64`.
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn write_u64(&mut self, value: u64) -> Result<()> {
        self.write_bytes(&value.to_le_bytes())
    }

    /// Writes an `f64` (its bits: NaN payloads and signed zeros survive).
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn write_f64(&mut self, value: f64) -> Result<()> {
        self.write_u64(value.to_bits())
    }

    /// Writes every `u64` of `values` (the reader needs to know how many).
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn write_u64s(&mut self, values: &[u64]) -> Result<()> {
        self.write_chunked(values, |v| v.to_le_bytes())
    }

    /// Writes every `u32` of `values` (the reader needs to know how many).
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn write_u32s(&mut self, values: &[u32]) -> Result<()> {
        self.write_chunked(values, |v| v.to_le_bytes())
    }

    /// Writes every `f64` of `values` (the reader needs to know how many).
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn write_f64s(&mut self, values: &[f64]) -> Result<()> {
        self.write_chunked(values, |v| v.to_bits().to_le_bytes())
    }

    /// Writes `values` as little-endian bytes through a bounded stack buffer.
    fn write_chunked<T: Copy, const N: usize>(
        &mut self,
        values: &[T],
        bytes: impl Fn(T) -> [u8; N],
    ) -> Result<()> {
        let mut buffer = [0u8; CHUNK * 8];
        for chunk in values.chunks(CHUNK) {
            let used = &mut buffer[..chunk.len() * N];
            for (out, &value) in used.chunks_exact_mut(N).zip(chunk) {
                out.copy_from_slice(&bytes(value));
            }
            self.write_bytes(used)?;
        }
        Ok(())
    }
}

/// Where a sampler reads its state back from ([`crate::sampler::Sampler::load_state`]): what
/// [`StateWriter`] wrote, in the same order. The file's header, length and checksum were
/// checked before the sampler reads anything; reading past the end of the state is an
/// [`Error::Corrupt`] error.
pub struct StateReader<'a> {
    input: &'a mut dyn Read,
    path: &'a Path,
    remaining: u64,
}

impl std::fmt::Debug for StateReader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateReader")
            .field("path", &self.path)
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}

impl StateReader<'_> {
    /// Fills `out` with the next bytes of the state.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the state holds fewer bytes; I/O errors.
    pub fn read_bytes(&mut self, out: &mut [u8]) -> Result<()> {
        if out.len() as u64 > self.remaining {
            return Err(self.corrupt(format!(
                "the sampler state ends {} bytes early: it was written by another sampler \
                 configuration",
                out.len() as u64 - self.remaining
            )));
        }
        self.input.read_exact(out).map_err(Error::io(format!(
            "reading the sampler state from {}",
            self.path.display()
        )))?;
        self.remaining -= out.len() as u64;
        Ok(())
    }

    /// Reads a `u64`.
    ///
    /// # Errors
    /// As [`StateReader::read_bytes`].
    pub fn read_u64(&mut self) -> Result<u64> {
        let mut bytes = [0; 8];
        self.read_bytes(&mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// Reads an `f64`.
    ///
    /// # Errors
    /// As [`StateReader::read_bytes`].
    pub fn read_f64(&mut self) -> Result<f64> {
        self.read_u64().map(f64::from_bits)
    }

    /// Fills `out` with the next `u64`s.
    ///
    /// # Errors
    /// As [`StateReader::read_bytes`].
    pub fn read_u64s(&mut self, out: &mut [u64]) -> Result<()> {
        self.read_chunked(out, u64::from_le_bytes)
    }

    /// Fills `out` with the next `u32`s.
    ///
    /// # Errors
    /// As [`StateReader::read_bytes`].
    pub fn read_u32s(&mut self, out: &mut [u32]) -> Result<()> {
        self.read_chunked(out, u32::from_le_bytes)
    }

    /// Fills `out` with the next `f64`s.
    ///
    /// # Errors
    /// As [`StateReader::read_bytes`].
    pub fn read_f64s(&mut self, out: &mut [f64]) -> Result<()> {
        self.read_chunked(out, |bytes| f64::from_bits(u64::from_le_bytes(bytes)))
    }

    /// Bytes of the state not read yet.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// An [`Error::Corrupt`] naming the sampler file: for values no sampler could have
    /// saved.
    pub fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            path: self.path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// An [`Error::SamplerMismatch`] naming the sampler file: for a state saved by a
    /// sampler built otherwise (another capacity, window length, ...).
    pub fn mismatch(&self, expected: impl Into<String>, found: impl Into<String>) -> Error {
        Error::SamplerMismatch {
            path: self.path.to_path_buf(),
            expected: expected.into(),
            found: found.into(),
        }
    }

    /// Reads little-endian values through a bounded stack buffer.
    fn read_chunked<T, const N: usize>(
        &mut self,
        out: &mut [T],
        value: impl Fn([u8; N]) -> T,
    ) -> Result<()> {
        let mut buffer = [0u8; CHUNK * 8];
        for chunk in out.chunks_mut(CHUNK) {
            let used = &mut buffer[..chunk.len() * N];
            self.read_bytes(used)?;
            for (slot, bytes) in chunk.iter_mut().zip(used.chunks_exact(N)) {
                let mut array = [0u8; N];
                array.copy_from_slice(bytes);
                *slot = value(array);
            }
        }
        Ok(())
    }
}

/// A generator's four state words (its serde form), for samplers' states.
#[derive(serde::Serialize, serde::Deserialize)]
struct Words {
    s: [u64; 4],
}

/// Writes a generator's state (four words).
pub(crate) fn write_rng(out: &mut StateWriter<'_>, rng: &Xoshiro256PlusPlus) -> Result<()> {
    let words = serde_json::to_value(rng)
        .and_then(serde_json::from_value::<Words>)
        .map_err(|e| Error::Corrupt {
            path: out.path.to_path_buf(),
            reason: format!("cannot encode the sampler's generator: {e}"),
        })?;
    out.write_u64s(&words.s)
}

/// Reads a generator's state written by [`write_rng`]; an all-zero state (which no
/// generator has) is corrupt.
pub(crate) fn read_rng(input: &mut StateReader<'_>) -> Result<Xoshiro256PlusPlus> {
    let mut words = Words { s: [0; 4] };
    input.read_u64s(&mut words.s)?;
    if words.s == [0; 4] {
        return Err(input.corrupt("the sampler's generator state is all zeros"));
    }
    serde_json::to_value(&words)
        .and_then(serde_json::from_value)
        .map_err(|e| input.corrupt(format!("the sampler's generator does not decode: {e}")))
}

/// The payload length and checksum of the header, once known.
fn header(format: StateFormat, bytes: u64, checksum: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(FIXED_HEADER + format.kind.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FILE_VERSION.to_le_bytes());
    header.extend_from_slice(&format.version.to_le_bytes());
    header.extend_from_slice(&bytes.to_le_bytes());
    header.extend_from_slice(&checksum.to_le_bytes());
    header.extend_from_slice(&(format.kind.len() as u32).to_le_bytes());
    header.extend_from_slice(format.kind.as_bytes());
    header
}

/// Saves `sampler`'s state to `dir/sampler.bin` and returns its kind, or removes an
/// earlier checkpoint's sampler file and returns `None` for a sampler without state.
pub(crate) fn save<P: Sampler + ?Sized>(sampler: &P, dir: &Path) -> Result<Option<&'static str>> {
    let path = dir.join(SAMPLER_FILE);
    let Some(format) = sampler.state_format() else {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing {}", path.display()))(e))
            }
            _ => Ok(None),
        };
    };
    if format.kind.is_empty() || format.kind.len() > MAX_KIND {
        return Err(Error::config(
            "sampler state kind",
            format!(
                "`{}` must be 1 to {MAX_KIND} bytes long: name the sampler briefly",
                format.kind
            ),
        ));
    }
    // Written beside the old file and renamed over it once whole.
    let temporary = dir.join(format!("{SAMPLER_FILE}.tmp"));
    let io = |what: &str| Error::io(format!("{what} {}", temporary.display()));
    let file = File::create(&temporary).map_err(io("creating"))?;
    let mut out = BufWriter::new(file);
    out.write_all(&header(format, 0, 0))
        .map_err(io("writing"))?;
    let mut writer = StateWriter {
        out: &mut out,
        path: &temporary,
        bytes: 0,
        checksum: Checksum::new(),
    };
    sampler.save_state(&mut writer)?;
    let (bytes, checksum) = (writer.bytes, writer.checksum.0);
    let mut file = out
        .into_inner()
        .map_err(|e| io("writing")(e.into_error()))?;
    file.seek(SeekFrom::Start(LENGTH_OFFSET))
        .map_err(io("seeking in"))?;
    let mut fields = [0u8; 16];
    fields[..8].copy_from_slice(&bytes.to_le_bytes());
    fields[8..].copy_from_slice(&checksum.to_le_bytes());
    file.write_all(&fields).map_err(io("writing"))?;
    file.sync_all().map_err(io("writing"))?;
    std::fs::rename(&temporary, &path).map_err(io("renaming into place"))?;
    Ok(Some(format.kind))
}

/// The header of a sampler file, checked.
struct Header {
    version: u32,
    bytes: u64,
    checksum: u64,
    kind: String,
    /// Bytes before the payload.
    len: u64,
}

/// Reads and checks the header of the sampler file at `path` against its length.
fn read_header(file: &mut File, path: &Path) -> Result<Header> {
    let io = |what: &str| Error::io(format!("{what} {}", path.display()));
    let actual = file.metadata().map_err(io("reading the size of"))?.len();
    let truncated = |expected: u64| Error::Truncated {
        path: path.to_path_buf(),
        expected,
        actual,
    };
    if actual < FIXED_HEADER as u64 {
        return Err(truncated(FIXED_HEADER as u64));
    }
    let mut fixed = [0u8; FIXED_HEADER];
    file.read_exact(&mut fixed).map_err(io("reading"))?;
    if &fixed[..8] != MAGIC {
        return Err(Error::BadMagic {
            path: path.to_path_buf(),
        });
    }
    let word =
        |at: usize| u32::from_le_bytes([fixed[at], fixed[at + 1], fixed[at + 2], fixed[at + 3]]);
    let long = |at: usize| u64::from(word(at)) | (u64::from(word(at + 4)) << 32);
    let file_version = word(8);
    if file_version != FILE_VERSION {
        return Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found: file_version,
            supported: FILE_VERSION,
        });
    }
    let kind_len = word(32) as usize;
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    if kind_len == 0 || kind_len > MAX_KIND {
        return Err(corrupt(format!(
            "the sampler kind is {kind_len} bytes long (1 to {MAX_KIND} expected)"
        )));
    }
    let len = (FIXED_HEADER + kind_len) as u64;
    let bytes = long(16);
    let expected = len.saturating_add(bytes);
    if actual < expected {
        return Err(truncated(expected));
    }
    if actual > expected {
        return Err(corrupt(format!(
            "{} bytes follow the sampler state",
            actual - expected
        )));
    }
    let mut kind = vec![0u8; kind_len];
    file.read_exact(&mut kind).map_err(io("reading"))?;
    let kind =
        String::from_utf8(kind).map_err(|_| corrupt("the sampler kind is not UTF-8".to_owned()))?;
    Ok(Header {
        version: word(12),
        bytes,
        checksum: long(24),
        kind,
        len,
    })
}

/// Restores `sampler` from `dir/sampler.bin`, saved for a sampler of kind `kind` (as the
/// checkpoint's metadata says), for a buffer whose ring is `ring` over `capacity`
/// positions. Everything about the file is checked before the sampler reads it; the
/// sampler is consumed, so an error leaves nothing half restored.
pub(crate) fn load<P: Sampler>(
    sampler: P,
    dir: &Path,
    kind: &str,
    ring: &RingState,
    capacity: usize,
) -> Result<P> {
    let path: PathBuf = dir.join(SAMPLER_FILE);
    let io = |what: &str| Error::io(format!("{what} {}", path.display()));
    let mismatch = |expected: String| Error::SamplerMismatch {
        path: path.clone(),
        expected,
        found: format!("the state of a `{kind}` sampler"),
    };
    let Some(format) = sampler.state_format() else {
        return Err(mismatch("a sampler that saves no state".to_owned()));
    };
    let mut file = File::open(&path).map_err(io("opening"))?;
    let header = read_header(&mut file, &path)?;
    if header.kind != kind {
        return Err(Error::Corrupt {
            path: path.clone(),
            reason: format!(
                "the file holds the state of a `{}` sampler but the checkpoint's metadata \
                 says `{kind}`",
                header.kind
            ),
        });
    }
    if format.kind != kind {
        return Err(mismatch(format!("a `{}` sampler", format.kind)));
    }
    if header.version != format.version {
        return Err(Error::UnsupportedVersion {
            path: path.clone(),
            found: header.version,
            supported: format.version,
        });
    }
    // First pass: the checksum, so that the sampler never reads damaged bytes.
    let mut input = BufReader::new(file);
    let mut checksum = Checksum::new();
    let mut buffer = [0u8; CHUNK * 8];
    let mut left = header.bytes;
    while left > 0 {
        let take = buffer
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        input
            .read_exact(&mut buffer[..take])
            .map_err(io("reading"))?;
        checksum.update(&buffer[..take]);
        left -= take as u64;
    }
    if checksum.0 != header.checksum {
        return Err(Error::Corrupt {
            path: path.clone(),
            reason: "the sampler state does not match its checksum".to_owned(),
        });
    }
    // Second pass: the sampler reads it.
    input
        .seek(SeekFrom::Start(header.len))
        .map_err(io("seeking in"))?;
    let mut reader = StateReader {
        input: &mut input,
        path: &path,
        remaining: header.bytes,
    };
    let sampler = sampler.load_state(ring, capacity, &mut reader)?;
    if reader.remaining > 0 {
        return Err(reader.corrupt(format!(
            "{} bytes of the sampler state were left unread: it was written by another \
             sampler configuration",
            reader.remaining
        )));
    }
    Ok(sampler)
}

#[cfg(test)]
mod tests;
