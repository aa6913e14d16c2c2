//! The process `cargo xtask crash-test` kills: a replay buffer in a memmap file, written
//! and committed until a SIGKILL; and the check that runs after each kill.
//!
//! Every row encodes its sequence number (`id`, the number of rows written before it):
//! the other columns are functions of it, so a torn row shows, and so does a missing one.
//!
//! ```text
//! crash_writer write PATH SEED
//!     Opens PATH (or creates it, printing `creating` first), prints `opened W L`, then
//!     forever: prints `intent N [wrap]` (N = rows written once this write is done;
//!     `wrap` when the write crosses the end of the ring), extends the buffer by 1..=64
//!     rows, and every few hundred rows commits and prints `committed W L` after commit
//!     returned. Every line is flushed before the work it announces starts.
//! crash_writer verify PATH W L N
//!     Opens PATH read-only and checks it against the last commit (W rows written, the
//!     newest L of them stored) and the most rows any write may have reached (N): prints
//!     one JSON line {"rows","written","lost","torn","fallback","temp_files"} or
//!     {"open_error": "..."} or {"missing": true, "temp_files"}.
//! ```

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use rl_core::{Column, DType, Schema};
use rl_storage::{
    ColumnSlice,
    memmap::{MemmapOptions, MemmapStorage},
    replay::ReplayBuffer,
    sampler::Uniform,
    storage::{HostStorage, Storage},
};

/// Rows of the ring: small, so that the ring wraps every few milliseconds.
const CAPACITY: usize = 4096;
/// The largest write.
const MAX_CHUNK: usize = 64;
/// The longest run of rows between two commits.
const MAX_COMMIT_EVERY: u64 = 1500;

fn schema() -> Schema {
    Schema::new([
        Column::scalar("id", DType::I64),
        Column::new("x", DType::F32, &[3]),
        Column::scalar("tag", DType::U8),
    ])
    .expect("a valid schema")
}

fn x_of(id: i64) -> [f32; 3] {
    [id as f32, (id % 1000) as f32 * 0.5, -((id % 7) as f32)]
}

fn tag_of(id: i64) -> u8 {
    (id.wrapping_mul(31) % 251) as u8
}

/// A small generator (splitmix64): the writer needs no more.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["write", path, seed] => write(Path::new(path), seed.parse()?),
        ["verify", path, w, l, n] => {
            verify(Path::new(path), w.parse()?, l.parse()?, n.parse()?);
            Ok(())
        }
        _ => Err("usage: crash_writer write PATH SEED | verify PATH W L N".into()),
    }
}

/// Prints one line and flushes it, so that it reaches the parent before the next step.
fn say(line: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(line)?;
    stdout.write_all(b"\n")?;
    stdout.flush()
}

fn write(path: &Path, seed: u64) -> Result<(), Box<dyn std::error::Error>> {
    let storage = if path.exists() {
        MemmapStorage::open_with(path, &schema(), CAPACITY, MemmapOptions::default())?
    } else {
        say(format_args!("creating"))?;
        MemmapStorage::create(path, schema(), CAPACITY, MemmapOptions::default())?
    };
    let mut buffer = ReplayBuffer::new(storage, Uniform::new(seed));
    let ring = buffer.ring();
    say(format_args!("opened {} {}", ring.written, ring.len))?;
    let mut random = Random(seed);
    let mut next_commit = ring.written + 1 + random.below(MAX_COMMIT_EVERY);
    let (mut id, mut x, mut tag) = (Vec::new(), Vec::new(), Vec::new());
    // A bound, so that a child whose parent died does not write forever.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let ring = buffer.ring();
        let rows = 1 + random.below(MAX_CHUNK as u64) as usize;
        id.clear();
        id.extend((0..rows as i64).map(|j| ring.written as i64 + j));
        x.clear();
        x.extend(id.iter().flat_map(|&i| x_of(i)));
        tag.clear();
        tag.extend(id.iter().map(|&i| tag_of(i)));
        let end = ring.written + rows as u64;
        let wraps = ring.cursor + rows > CAPACITY;
        say(format_args!(
            "intent {end}{}",
            if wraps { " wrap" } else { "" }
        ))?;
        buffer.extend(&[
            ColumnSlice::from(&id),
            ColumnSlice::from(&x),
            ColumnSlice::from(&tag),
        ])?;
        if end >= next_commit {
            buffer.commit()?;
            let ring = buffer.ring();
            say(format_args!("committed {} {}", ring.written, ring.len))?;
            next_commit = end + 1 + random.below(MAX_COMMIT_EVERY);
        }
    }
    Err("not killed within 60 s".into())
}

/// Checks the file after a kill and prints the verdict as one JSON line.
fn verify(path: &Path, written: u64, len: u64, reached: u64) {
    let temp_files = path
        .parent()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .map_or(0, |entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(".rlmm-tmp-"))
                .count()
        });
    if !path.exists() {
        println!("{{\"missing\":true,\"temp_files\":{temp_files}}}");
        return;
    }
    let storage = match MemmapStorage::open_read_only(path, MemmapOptions::default()) {
        Ok(storage) => storage,
        Err(error) => {
            let text = error.to_string().replace(['"', '\\'], "'");
            println!("{{\"open_error\":\"{text}\"}}");
            return;
        }
    };
    let ring = storage.restored();
    let ids: &[i64] = bytemuck::cast_slice(storage.column(0));
    let xs: &[[f32; 3]] = bytemuck::cast_slice(storage.column(1));
    let tags = storage.column(2);
    // A stored row is whole when every column agrees with its id and it sits where
    // its id puts it.
    let whole = |position: usize| {
        let id = ids[position];
        id >= 0
            && (id as usize) % CAPACITY == position
            && xs[position] == x_of(id)
            && tags[position] == tag_of(id)
    };
    let mut torn = 0u64;
    for i in 0..ring.len {
        let position = ring.position(i, CAPACITY);
        let expected = ring.written as i64 - ring.len as i64 + i as i64;
        if !whole(position) || ids[position] != expected {
            torn += 1;
        }
    }
    // The contract: every row of the last commit whose position no write since reached.
    let first_kept = (written - len).max(reached.saturating_sub(CAPACITY as u64));
    let stored = ring.written - ring.len as u64..ring.written;
    let lost = (first_kept..written)
        .filter(|&id| {
            let position = id as usize % CAPACITY;
            !(stored.contains(&id) && ids[position] == id as i64 && whole(position))
        })
        .count();
    println!(
        "{{\"rows\":{},\"written\":{},\"lost\":{lost},\"torn\":{torn},\"fallback\":{},\"sequence\":{},\"temp_files\":{temp_files}}}",
        ring.len,
        ring.written,
        storage.recovery().fallback.is_some(),
        storage.recovery().sequence,
    );
}
