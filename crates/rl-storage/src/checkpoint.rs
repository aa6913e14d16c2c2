//! Checkpoints of RAM buffers: a directory of raw columns plus versioned metadata, written
//! and read without a second in-memory copy.
//!
//! Layout of a checkpoint directory:
//!
//! - `column-<index>.bin`: the stored rows of one column, oldest first, raw little-endian
//!   elements, streamed straight from (and back into) the storage's memory;
//! - `sampler.bin`: the sampler's state (generator, priorities, epoch), when the sampler
//!   saves one ([`crate::sampler::Sampler::state_format`]); format in [`crate::sampler::StateWriter`]'s
//!   module: versioned, checksummed, written beside the old file and renamed into place;
//! - `meta.json`: format name and version, schema, capacity, ring counters and cursor,
//!   each column's byte length, and the sampler's kind (`null` when it saved no state).
//!   Written last, through a temporary file and a rename, so a directory with a
//!   `meta.json` is a complete checkpoint.
//!
//! Checkpoints written before samplers saved their state have no `sampler` field and no
//! `sampler.bin`: they load with the sampler as constructed (see [`ReplayBuffer::load`]).
//!
//! Memory-mapped buffers need none of this: their file *is* the checkpoint
//! ([`ReplayBuffer::commit`]).

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use rl_core::Schema;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ram::RamStorage;
use crate::replay::ReplayBuffer;
use crate::sampler::Sampler;
use crate::sampler_state;
use crate::storage::{HostStorage, RingState, Storage};

const FORMAT: &str = "rl-storage-checkpoint";
const VERSION: u32 = 1;
const META: &str = "meta.json";

#[derive(Serialize, Deserialize)]
struct Meta {
    format: String,
    version: u32,
    schema: Schema,
    capacity: usize,
    ring: RingState,
    column_bytes: Vec<u64>,
    /// Kind of the sampler whose state `sampler.bin` holds; absent from checkpoints
    /// written before samplers saved their state, `None` for a sampler without state.
    #[serde(default)]
    sampler: Option<String>,
}

/// The positions of the stored rows, oldest first, as two runs: from the oldest to the end
/// of the ring, then from position 0 (possibly empty). Column files hold the rows in
/// this order.
fn stored_runs(ring: &RingState, capacity: usize) -> [std::ops::Range<usize>; 2] {
    let oldest = ring.oldest(capacity);
    let first = (capacity - oldest).min(ring.len);
    [oldest..oldest + first, 0..ring.len - first]
}

fn column_file(dir: &Path, index: usize) -> std::path::PathBuf {
    dir.join(format!("column-{index}.bin"))
}

impl<P: Sampler> ReplayBuffer<RamStorage, P> {
    /// Saves the stored rows and the sampler's state to `dir` (created if missing; an
    /// earlier checkpoint there is replaced). Streams each column, and the sampler's
    /// state, from memory: no second copy.
    ///
    /// The sampler's state is what [`Sampler::save_state`] writes (for the samplers of
    /// this crate: the generator, and the priorities or the epoch in progress), so that
    /// [`ReplayBuffer::load`] gives a buffer that draws exactly what this one would draw
    /// next. A sampler without state ([`Sampler::state_format`] `None`) saves none.
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        let storage = self.storage();
        let ring = self.ring();
        let runs = stored_runs(&ring, storage.capacity());
        let mut column_bytes = Vec::with_capacity(storage.schema().columns().len());
        for (index, column) in storage.schema().columns().iter().enumerate() {
            let path = column_file(dir, index);
            let io = || Error::io(format!("writing {}", path.display()));
            let mut file = File::create(&path).map_err(io())?;
            let row_bytes = column.row_bytes();
            let bytes = storage.column(index);
            for run in &runs {
                file.write_all(&bytes[run.start * row_bytes..run.end * row_bytes])
                    .map_err(io())?;
            }
            file.sync_all().map_err(io())?;
            column_bytes.push((ring.len * row_bytes) as u64);
        }
        let sampler = sampler_state::save(self.sampler(), dir)?.map(str::to_owned);
        let meta = Meta {
            format: FORMAT.to_owned(),
            version: VERSION,
            schema: storage.schema().clone(),
            capacity: storage.capacity(),
            ring,
            column_bytes,
            sampler,
        };
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| Error::Corrupt {
            path: dir.join(META),
            reason: format!("cannot encode metadata: {e}"),
        })?;
        let temporary = dir.join("meta.json.tmp");
        std::fs::write(&temporary, json)
            .map_err(Error::io(format!("writing {}", temporary.display())))?;
        std::fs::rename(&temporary, dir.join(META)).map_err(Error::io(format!(
            "renaming {} into place",
            temporary.display()
        )))
    }

    /// Loads a checkpoint saved by [`ReplayBuffer::save`] into a new RAM buffer with
    /// `sampler`. The stored rows land at the positions they had, and the ring (cursor,
    /// counters) carries over.
    ///
    /// **The sampler**: when the checkpoint holds a sampler state, `sampler` takes it
    /// ([`Sampler::load_state`]; its seed no longer matters), and the buffer draws
    /// exactly the positions and weights the saved buffer would have drawn next. It must
    /// be a sampler of the same kind built for the same shape (capacity, window length,
    /// last-batch mode): anything else is refused. When the checkpoint holds no sampler
    /// state (it was written before samplers saved theirs, or by a sampler without
    /// state), `sampler` is left as constructed and told about the loaded rows, as for
    /// a reopened file: [`Prioritized`](crate::sampler::Prioritized) gives them all its initial
    /// priority, and draws follow the new sampler's seed.
    ///
    /// Everything is read into a new buffer: on error nothing else changed (and
    /// `sampler` is dropped).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for missing or unreadable metadata or a damaged sampler file,
    /// [`Error::UnsupportedVersion`], [`Error::Truncated`] for a column or sampler file
    /// shorter than it should be, [`Error::SamplerMismatch`] for a sampler state saved by
    /// a sampler of another kind or shape, I/O errors.
    pub fn load(dir: &Path, sampler: P) -> Result<Self> {
        let meta_path = dir.join(META);
        let text = std::fs::read(&meta_path)
            .map_err(Error::io(format!("reading {}", meta_path.display())))?;
        let meta: Meta = serde_json::from_slice(&text).map_err(|e| Error::Corrupt {
            path: meta_path.clone(),
            reason: format!("metadata does not parse: {e}"),
        })?;
        if meta.format != FORMAT {
            return Err(Error::BadMagic { path: meta_path });
        }
        if meta.version != VERSION {
            return Err(Error::UnsupportedVersion {
                path: meta_path,
                found: meta.version,
                supported: VERSION,
            });
        }
        meta.ring.validate(meta.capacity)?;
        if meta.column_bytes.len() != meta.schema.columns().len() {
            return Err(Error::Corrupt {
                path: meta_path,
                reason: "the column list does not match the schema".into(),
            });
        }
        let mut storage = RamStorage::new(meta.schema.clone(), meta.capacity, None)?;
        let (ring, capacity) = (meta.ring, meta.capacity);
        let runs = stored_runs(&ring, capacity);
        for (index, column) in meta.schema.columns().iter().enumerate() {
            let expected = (meta.ring.len * column.row_bytes()) as u64;
            let path = column_file(dir, index);
            let mut file =
                File::open(&path).map_err(Error::io(format!("opening {}", path.display())))?;
            let actual = file
                .metadata()
                .map_err(Error::io(format!("reading the size of {}", path.display())))?
                .len();
            if actual != expected || meta.column_bytes[index] != expected {
                return Err(Error::Truncated {
                    path,
                    expected,
                    actual,
                });
            }
            // Back at the positions they were saved from.
            let row_bytes = column.row_bytes();
            let target = storage.column_mut(index);
            for run in &runs {
                file.read_exact(&mut target[run.start * row_bytes..run.end * row_bytes])
                    .map_err(Error::io(format!("reading {}", path.display())))?;
            }
        }
        Ok(match &meta.sampler {
            Some(kind) => {
                let sampler = sampler_state::load(sampler, dir, kind, &ring, capacity)?;
                ReplayBuffer::with_restored_sampler(storage, sampler, ring)
            }
            None => ReplayBuffer::with_ring(storage, sampler, ring),
        })
    }
}

#[cfg(test)]
mod tests;
