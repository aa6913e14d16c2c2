//! Checkpoints of RAM buffers: a directory of raw columns plus versioned metadata, written
//! and read without a second in-memory copy.
//!
//! Layout of a checkpoint directory:
//!
//! - `column-<index>.bin`: the stored rows of one column, oldest first, raw little-endian
//!   elements, streamed straight from (and back into) the storage's memory;
//! - `meta.json`: format name and version, schema, capacity, ring counters and each
//!   column's byte length. Written last, through a temporary file and a rename, so a
//!   directory with a `meta.json` is a complete checkpoint.
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
}

fn column_file(dir: &Path, index: usize) -> std::path::PathBuf {
    dir.join(format!("column-{index}.bin"))
}

impl<P: Sampler> ReplayBuffer<RamStorage, P> {
    /// Saves the stored rows to `dir` (created if missing; an earlier checkpoint there is
    /// replaced). Streams each column from the buffer's memory: no second copy.
    ///
    /// # Errors
    /// I/O errors, naming the file.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        let storage = self.storage();
        let ring = self.ring();
        let capacity = storage.capacity();
        let oldest = ring.oldest(capacity);
        let mut column_bytes = Vec::with_capacity(storage.schema().columns().len());
        for (index, column) in storage.schema().columns().iter().enumerate() {
            let path = column_file(dir, index);
            let io = || Error::io(format!("writing {}", path.display()));
            let mut file = File::create(&path).map_err(io())?;
            let row_bytes = column.row_bytes();
            let bytes = storage.column(index);
            // Oldest first: the rows from `oldest` to the end, then the wrapped part.
            let first = (capacity - oldest).min(ring.len);
            file.write_all(&bytes[oldest * row_bytes..(oldest + first) * row_bytes])
                .map_err(io())?;
            file.write_all(&bytes[..(ring.len - first) * row_bytes])
                .map_err(io())?;
            file.sync_all().map_err(io())?;
            column_bytes.push((ring.len * row_bytes) as u64);
        }
        let meta = Meta {
            format: FORMAT.to_owned(),
            version: VERSION,
            schema: storage.schema().clone(),
            capacity,
            ring,
            column_bytes,
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
    /// `sampler`. The stored rows land at positions `0..len`, oldest first; counters
    /// (rows written, episodes) carry over.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for missing or unreadable metadata, [`Error::UnsupportedVersion`],
    /// [`Error::Truncated`] for a column file shorter than its metadata says, I/O errors.
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
        let mut storage = RamStorage::new(meta.schema.clone(), meta.capacity)?;
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
            file.read_exact(&mut storage.column_mut(index)[..expected as usize])
                .map_err(Error::io(format!("reading {}", path.display())))?;
        }
        let ring = RingState {
            cursor: meta.ring.len % meta.capacity,
            ..meta.ring
        };
        Ok(ReplayBuffer::with_ring(storage, sampler, ring))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rl_core::{Column, DType, Flag};

    use super::*;
    use crate::{ColumnSlice, Uniform};

    fn schema() -> Schema {
        Schema::new([
            Column::new("obs", DType::U8, &[5]),
            Column::scalar("id", DType::I64),
            Column::scalar("terminated", DType::Bool),
        ])
        .unwrap()
    }

    fn write(buffer: &mut ReplayBuffer, ids: std::ops::Range<i64>) {
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
            let mut buffer = ReplayBuffer::new(RamStorage::new(schema(), capacity).unwrap(), Uniform::new(0));
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
        let mut buffer = ReplayBuffer::new(RamStorage::new(schema(), 10).unwrap(), Uniform::new(0));
        write(&mut buffer, 0..6);
        buffer.save(dir.path()).unwrap();
        let column = column_file(dir.path(), 1);
        let full = std::fs::read(&column).unwrap();
        std::fs::write(&column, &full[..full.len() - 3]).unwrap();
        let err =
            ReplayBuffer::<RamStorage, Uniform>::load(dir.path(), Uniform::new(0)).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err}");
        std::fs::write(&column, &full).unwrap();
        let meta = dir.path().join(META);
        let text = std::fs::read_to_string(&meta).unwrap();
        std::fs::write(&meta, text.replace("\"version\": 1", "\"version\": 99")).unwrap();
        let err =
            ReplayBuffer::<RamStorage, Uniform>::load(dir.path(), Uniform::new(0)).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedVersion { found: 99, .. }),
            "{err}"
        );
        std::fs::write(&meta, "{ not json").unwrap();
        let err =
            ReplayBuffer::<RamStorage, Uniform>::load(dir.path(), Uniform::new(0)).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        let missing =
            ReplayBuffer::<RamStorage, Uniform>::load(&dir.path().join("nope"), Uniform::new(0));
        assert!(matches!(missing, Err(Error::Io { .. })));
    }

    #[test]
    fn saving_and_loading_make_no_second_copy() {
        let dir = tempfile::tempdir().unwrap();
        let mut buffer =
            ReplayBuffer::new(RamStorage::new(schema(), 200_000).unwrap(), Uniform::new(0));
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
}
