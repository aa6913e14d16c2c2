//! The header of a memmap file: encoding, the checks `open` makes before anything is
//! mapped, the two commit slots and what a reopen recovered from them.
//!
//! The format is documented on [`MemmapStorage`](super::MemmapStorage).

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use rl_core::Schema;

use crate::error::{Error, Result};
use crate::storage::{COLUMN_ALIGN, ColumnLayout, RingState};

/// First eight bytes of every file.
pub(super) const MAGIC: [u8; 8] = *b"RLMEMMAP";
/// The format version this build writes and reads.
pub(super) const FORMAT_VERSION: u32 = 1;
pub(super) const OFF_VERSION: usize = 8;
pub(super) const OFF_HEADER_BYTES: usize = 16;
pub(super) const OFF_CAPACITY: usize = 24;
/// Written as 0; files made before per-write reservations hold their reserve here.
pub(super) const OFF_RESERVED_ROWS: usize = 32;
pub(super) const OFF_SCHEMA_LEN: usize = 40;
/// The static checksum covers the bytes before it, then the schema JSON.
pub(super) const OFF_STATIC_SUM: usize = 48;
/// Eight reserved bytes after the static checksum, not covered by it: must be zero.
pub(super) const OFF_RESERVED_TAIL: usize = 56;
pub(super) const SLOT_OFFSETS: [usize; 2] = [64, 128];
pub(super) const SLOT_LEN: usize = 64;
pub(super) const SLOT_SUM: usize = 56;
pub(super) const OFF_SCHEMA: usize = 192;
/// Refuse to read a schema larger than this (a damaged length must not allocate gigabytes).
pub(super) const MAX_SCHEMA_BYTES: u64 = 16 << 20;

/// One commit slot of the header: a sequence number and a ring state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    pub(super) seq: u64,
    pub(super) ring: RingState,
}

impl Slot {
    pub(super) fn encode(&self) -> [u8; SLOT_LEN] {
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
}

/// `RingState::default()`, as a constant.
const EMPTY_RING: RingState = RingState {
    cursor: 0,
    len: 0,
    written: 0,
    episodes: 0,
    episode_start: 0,
};

/// The slots `create` writes: both hold the empty ring, slot B with the higher sequence
/// number, so a new file opens at sequence 2 and its first header update goes to slot A
/// (sequence 3). Neither slot of a file is ever all zeros (see `choose_slot`).
pub(super) const FRESH_SLOTS: [Slot; 2] = [
    Slot {
        seq: 1,
        ring: EMPTY_RING,
    },
    Slot {
        seq: 2,
        ring: EMPTY_RING,
    },
];
/// Which of [`FRESH_SLOTS`] is in force in a new file.
pub(super) const FRESH_NEWEST: usize = 1;

/// What the bytes of one slot hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotRead {
    /// All 64 bytes zero: erased (or, in a file an older rl-storage created and never
    /// committed, never written).
    Empty,
    /// Checksum matches and the sequence number is not 0.
    Valid(Slot),
    /// Anything else: a write cut short by a crash, or damage.
    Damaged {
        claimed_sequence: u64,
        reason: SlotDamage,
    },
}

fn read_slot(bytes: &[u8]) -> SlotRead {
    if bytes.iter().all(|&b| b == 0) {
        return SlotRead::Empty;
    }
    let claimed_sequence = read_u64(bytes, 0);
    if fnv1a(FNV_OFFSET, &bytes[..SLOT_SUM]) != read_u64(bytes, SLOT_SUM) {
        return SlotRead::Damaged {
            claimed_sequence,
            reason: SlotDamage::Checksum,
        };
    }
    // Positions past `usize` cannot fit any capacity: the ring check below refuses them.
    let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let ring = RingState {
        cursor: to_usize(read_u64(bytes, 8)),
        len: to_usize(read_u64(bytes, 16)),
        written: read_u64(bytes, 24),
        episodes: read_u64(bytes, 32),
        episode_start: read_u64(bytes, 40),
    };
    if claimed_sequence == 0 {
        return SlotRead::Damaged {
            claimed_sequence,
            reason: SlotDamage::ZeroSequence,
        };
    }
    SlotRead::Valid(Slot {
        seq: claimed_sequence,
        ring,
    })
}

/// Why a commit slot was not used when a file was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotDamage {
    /// Its checksum does not match: a header update cut short by a crash, or damage.
    Checksum,
    /// Its checksum matches but its sequence number is 0, which no writer stores.
    ZeroSequence,
    /// It is all zeros. Every file this version creates has both slots written, so the
    /// slot was erased. (A file created by an older rl-storage, which wrote only slot A
    /// at create, reads the same until its first commit: then it lost nothing.)
    Erased,
}

impl fmt::Display for SlotDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SlotDamage::Checksum => {
                "fails its checksum (a header update cut short by a crash, or a damaged byte)"
            }
            SlotDamage::ZeroSequence => "holds sequence number 0, which no writer stores",
            SlotDamage::Erased => {
                "is all zeros, though every file is created with both slots written: it was \
                 erased (a file an older rl-storage created and never committed reads the same, \
                 and lost nothing)"
            }
        })
    }
}

/// A commit slot that could not be used, so the file's state comes from the other one,
/// which may be older than the newest state the writer recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotFallback {
    /// The unusable slot: 0 for slot A (byte 64), 1 for slot B (byte 128).
    pub slot: usize,
    /// The sequence number the unusable slot claims. Unverified: the slot failed its
    /// checks, so this may be damaged too.
    pub claimed_sequence: u64,
    /// Why it was not used.
    pub reason: SlotDamage,
}

impl fmt::Display for SlotFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "commit slot {} (claiming sequence {}) {}",
            ["A", "B"][self.slot.min(1)],
            self.claimed_sequence,
            self.reason
        )
    }
}

/// What opening a file recovered: the commit in force, whether the other slot was
/// unusable (a fallback, with the reason), and the rows it gives back.
///
/// A file written and closed normally, or killed at any moment other than the few
/// instructions that write a header slot, reopens with `fallback: None`. A fallback
/// means one slot was unusable: after a crash in the middle of a header update that is
/// expected and loses nothing committed (the update had not returned), but damage to
/// a slot gives the same picture, and the state in force may then be older than the
/// last commit. [`Fallback::Refuse`] turns every fallback into an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Sequence number of the slot in force (2 for a new file; every commit and every
    /// reservation adds 1).
    pub sequence: u64,
    /// The ring in force: what [`Storage::restored`](crate::storage::Storage::restored)
    /// returns.
    pub ring: RingState,
    /// Rows recoverable: the ring's `len`.
    pub rows: usize,
    /// `Some` when the other slot was unusable, with the reason.
    pub fallback: Option<SlotFallback>,
}

impl Recovery {
    /// The recovery of a new, empty file.
    pub(super) fn fresh() -> Self {
        let newest = FRESH_SLOTS[FRESH_NEWEST];
        Self {
            sequence: newest.seq,
            ring: newest.ring,
            rows: newest.ring.len,
            fallback: None,
        }
    }
}

impl fmt::Display for Recovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sequence {} in force, {} rows recoverable ({} written)",
            self.sequence, self.rows, self.ring.written
        )?;
        if let Some(fallback) = &self.fallback {
            write!(f, "; fell back to the other slot: {fallback}")?;
        }
        Ok(())
    }
}

/// What `open` does when one commit slot is unusable and the other holds a valid state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Open with the valid slot and report the fallback in
    /// [`MemmapStorage::recovery`](super::MemmapStorage::recovery). The default: a
    /// crash in the middle of a header update leaves exactly this, and loses nothing
    /// committed.
    #[default]
    Report,
    /// Refuse with [`Error::Fallback`] (a strict open): for a caller that would rather
    /// stop than continue from a state that may be older than the last commit.
    Refuse,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits, continuing from `state` (start with [`FNV_OFFSET`]). A single changed
/// byte always changes the sum (each step is a bijection of the state).
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
pub(super) fn schema_json(schema: &Schema) -> Result<Vec<u8>> {
    serde_json::to_vec(schema)
        .map_err(|e| Error::config("schema", format!("cannot be written as JSON: {e}")))
}

/// Header bytes for a schema JSON of `json_len` bytes: the fixed part and the JSON,
/// rounded up to a page so that the columns stay page-aligned.
pub(super) fn header_bytes_for(json_len: usize) -> Result<usize> {
    OFF_SCHEMA
        .checked_add(json_len)
        .and_then(|end| end.checked_next_multiple_of(COLUMN_ALIGN))
        .ok_or_else(|| Error::config("schema", "is too large to store in a file header"))
}

/// The header of a new file: static part, schema, and both slots ([`FRESH_SLOTS`]).
pub(super) fn encode_header(json: &[u8], header_bytes: usize, capacity: usize) -> Vec<u8> {
    let mut header = vec![0u8; header_bytes];
    header[..8].copy_from_slice(&MAGIC);
    header[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    put_u64(&mut header, OFF_HEADER_BYTES, header_bytes as u64);
    put_u64(&mut header, OFF_CAPACITY, capacity as u64);
    put_u64(&mut header, OFF_RESERVED_ROWS, 0);
    put_u64(&mut header, OFF_SCHEMA_LEN, json.len() as u64);
    header[OFF_SCHEMA..OFF_SCHEMA + json.len()].copy_from_slice(json);
    let sum = fnv1a(fnv1a(FNV_OFFSET, &header[..OFF_STATIC_SUM]), json);
    put_u64(&mut header, OFF_STATIC_SUM, sum);
    for (at, slot) in SLOT_OFFSETS.into_iter().zip(FRESH_SLOTS) {
        header[at..at + SLOT_LEN].copy_from_slice(&slot.encode());
    }
    header
}

/// What `open` learned from a file's header before mapping it.
pub(super) struct Header {
    pub(super) schema: Schema,
    pub(super) capacity: usize,
    pub(super) header_bytes: usize,
    pub(super) layout: ColumnLayout,
    pub(super) map_len: usize,
    pub(super) newest: Slot,
    pub(super) newest_index: usize,
    pub(super) recovery: Recovery,
}

/// Reads and checks a file's header with plain reads, before anything is mapped.
///
/// Order matters: nothing the static checksum covers (sizes above all) is trusted
/// before the checksum matched, so a damaged size reads as damage, never as a
/// truncation to an absurd length.
pub(super) fn read_header(file: &mut File, path: &Path, fallback: Fallback) -> Result<Header> {
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

    // The schema length is needed to check the checksum: bound it by what can be read.
    let schema_len = read_u64(&fixed, OFF_SCHEMA_LEN);
    if schema_len > MAX_SCHEMA_BYTES || OFF_SCHEMA as u64 + schema_len > file_len {
        return Err(corrupt(format!(
            "the header claims a {schema_len}-byte schema, which a {file_len}-byte file \
             cannot hold: the header is damaged; restore the file from a copy"
        )));
    }
    // Bounded by MAX_SCHEMA_BYTES and the file's length above.
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
    // From here on the sizes are the ones the writer stored.
    let header_bytes = read_u64(&fixed, OFF_HEADER_BYTES);
    let expected_header = header_bytes_for(json.len())? as u64;
    if header_bytes != expected_header {
        return Err(corrupt(format!(
            "the header claims {header_bytes} header bytes where its {schema_len}-byte \
             schema needs {expected_header}: restore the file from a copy"
        )));
    }
    if read_u64(&fixed, OFF_RESERVED_TAIL) != 0 {
        return Err(corrupt(
            "header bytes 56..64 (reserved) are not zero: the header is damaged; restore \
             the file from a copy"
                .to_owned(),
        ));
    }
    if file_len < header_bytes {
        return Err(truncated(header_bytes, file_len));
    }
    let header_bytes = header_bytes as usize; // at most 16 MiB + a page, checked above
    let mut padding = vec![0u8; header_bytes - OFF_SCHEMA - json.len()];
    file.read_exact(&mut padding).map_err(read_error())?;
    if let Some(at) = padding.iter().position(|&b| b != 0) {
        return Err(corrupt(format!(
            "header byte {} (padding after the schema) is not zero: the header is \
             damaged; restore the file from a copy",
            OFF_SCHEMA + json.len() + at
        )));
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
    let map_len = header_bytes
        .checked_add(layout.total())
        .ok_or_else(|| corrupt("the file is larger than this machine can map".to_owned()))?;
    if file_len < map_len as u64 {
        return Err(truncated(map_len as u64, file_len));
    }

    let (newest_index, newest, recovery) = choose_slot(&fixed, capacity, path)?;
    if let (Fallback::Refuse, Some(damaged)) = (fallback, recovery.fallback) {
        return Err(Error::Fallback {
            path: path.to_path_buf(),
            damaged: damaged.to_string(),
            sequence: recovery.sequence,
            rows: recovery.rows,
        });
    }
    Ok(Header {
        schema,
        capacity,
        header_bytes,
        layout,
        map_len,
        newest,
        newest_index,
        recovery,
    })
}

/// The slot in force (the valid one with the highest sequence number) and the report of
/// what was recovered. A slot whose checksum matches but whose ring cannot be (a writer's
/// bug or a forged header, never a crash) makes the file corrupt.
fn choose_slot(fixed: &[u8], capacity: usize, path: &Path) -> Result<(usize, Slot, Recovery)> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let reads = SLOT_OFFSETS.map(|at| read_slot(&fixed[at..at + SLOT_LEN]));
    for read in reads {
        if let SlotRead::Valid(slot) = read {
            slot.ring.validate(capacity).map_err(|e| {
                corrupt(format!(
                    "the commit with sequence {} is inconsistent: {e}",
                    slot.seq
                ))
            })?;
        }
    }
    let (index, newest) = match reads {
        [SlotRead::Valid(a), SlotRead::Valid(b)] if b.seq > a.seq => (1, b),
        [SlotRead::Valid(a), _] => (0, a),
        [_, SlotRead::Valid(b)] => (1, b),
        _ => {
            return Err(corrupt(
                "neither commit slot holds a valid state (both fail their checks): restore \
                 the file from a copy"
                    .to_owned(),
            ));
        }
    };
    let other = 1 - index;
    let fallback = match reads[other] {
        SlotRead::Valid(_) => None,
        // An all-zero slot is always reported, whatever the other slot holds.
        //
        // Files created by older versions held only slot A (sequence 1, the empty ring)
        // until their first header update wrote sequence 2 into slot B. Such a file that
        // was never committed has the very bytes of one whose first commit (slot B) was
        // zeroed: the header cannot tell them apart, and neither can the rows (rows
        // written but never committed look like committed ones). Treating that header
        // as a new file (as before) reopened the damaged file as an empty buffer, its
        // committed rows lost without a word, even under `Fallback::Refuse`. So `create`
        // writes both slots (`FRESH_SLOTS`): no file this version makes has an all-zero
        // slot unless the slot was erased. An older file that was never committed gets
        // the report too (sequence 1, no rows: it lost nothing) and a strict open
        // refuses it; its first commit writes slot B and ends that.
        SlotRead::Empty => Some(SlotFallback {
            slot: other,
            claimed_sequence: 0,
            reason: SlotDamage::Erased,
        }),
        SlotRead::Damaged {
            claimed_sequence,
            reason,
        } => Some(SlotFallback {
            slot: other,
            claimed_sequence,
            reason,
        }),
    };
    let recovery = Recovery {
        sequence: newest.seq,
        ring: newest.ring,
        rows: newest.ring.len,
        fallback,
    };
    Ok((index, newest, recovery))
}
