//! A real `kill -9` in the middle of writing a memory-mapped storage.
//!
//! The test re-runs its own binary as a child process that writes rows forever through a
//! minimal ring writer and commits every few hundred rows, printing `committed <written>`
//! after each commit. The parent kills it with SIGKILL at an arbitrary moment, reopens the
//! file and checks that every returned row is whole, that the rows are consecutive, and
//! that nothing committed before the kill was lost but the rows of the write the kill
//! interrupted (the commit contract; `cargo xtask crash-test` checks it row by row). Five
//! rounds, each killing at a different delay: every child after the first resumes the
//! file the previous one left.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rl_core::{Column, DType, Schema};
use rl_storage::{
    memmap::{MemmapOptions, MemmapStorage},
    storage::{HostStorage, RingState, Storage},
};

/// Set in the child to the path of the file to write.
const CHILD_ENV: &str = "RL_CRASH_CHILD";
/// The test the child runs.
const CHILD_TEST: &str = "child_writes_until_killed";
const CAPACITY: usize = 4096;
const MAX_CHUNK: usize = 48;
const COMMIT_EVERY: u64 = 300;
/// How long the parent waits, after its conditions are met, before it kills the child:
/// one round per delay, so the kill lands at different points of the write-commit cycle
/// (writing rows, flushing them, writing the header).
const KILL_DELAYS_US: [u64; 5] = [0, 250, 700, 1500, 3000];

fn schema() -> Schema {
    Schema::new([
        Column::scalar("id", DType::I64),
        Column::new("x", DType::F32, &[3]),
        Column::scalar("tag", DType::U8),
    ])
    .unwrap()
}

fn x_of(id: i64) -> [f32; 3] {
    [id as f32, (id % 1000) as f32 * 0.5, -((id % 7) as f32)]
}

fn tag_of(id: i64) -> u8 {
    (id.wrapping_mul(31) % 251) as u8
}

/// The child: writes rows `id = written index` forever, committing every
/// `COMMIT_EVERY` rows. Returns at once when not started by the parent test.
#[test]
fn child_writes_until_killed() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let path = Path::new(&path);
    let mut storage = if path.exists() {
        MemmapStorage::open_with(path, &schema(), CAPACITY, MemmapOptions::default()).unwrap()
    } else {
        MemmapStorage::create(path, schema(), CAPACITY, MemmapOptions::default()).unwrap()
    };
    let mut ring = storage.restored();
    let mut last_commit = ring.written;
    let mut random = ring.written | 1;
    let mut stdout = std::io::stdout().lock();
    // A bound, so that a child whose parent died does not write forever.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        random = random
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let rows = 1 + (random >> 33) as usize % MAX_CHUNK;
        storage.prepare_write(&ring, rows).unwrap();
        for j in 0..rows {
            let position = (ring.cursor + j) % CAPACITY;
            let id = (ring.written + j as u64) as i64;
            bytemuck::cast_slice_mut::<u8, i64>(storage.column_mut(0))[position] = id;
            bytemuck::cast_slice_mut::<u8, [f32; 3]>(storage.column_mut(1))[position] = x_of(id);
            storage.column_mut(2)[position] = tag_of(id);
        }
        ring = RingState {
            cursor: (ring.cursor + rows) % CAPACITY,
            len: (ring.len + rows).min(CAPACITY),
            written: ring.written + rows as u64,
            ..ring
        };
        if ring.written - last_commit >= COMMIT_EVERY {
            storage.commit(&ring).unwrap();
            last_commit = ring.written;
            if writeln!(stdout, "committed {}", ring.written)
                .and_then(|()| stdout.flush())
                .is_err()
            {
                return; // the parent is gone
            }
        }
    }
    panic!("child was not killed within 60 s");
}

/// Runs one child until it has committed at least 5 times and wrapped the ring twice,
/// waits `delay`, kills it, and returns the last `committed N` it printed and how many
/// commits it printed.
fn run_and_kill(path: &Path, start: u64, delay: Duration) -> (u64, usize) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, commits) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("committed ") {
                let n: u64 = n.trim().parse().unwrap();
                if sender.send(n).is_err() {
                    break;
                }
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = 0usize;
    let mut last = start;
    while seen < 5 || last < start + 2 * CAPACITY as u64 {
        match commits.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(n) => {
                seen += 1;
                last = n;
            }
            Err(e) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("the child stopped reporting after {seen} commits ({e}); {status:?}");
            }
        }
    }
    std::thread::sleep(delay);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "the child ended on its own: {status}"
        );
    }
    #[cfg(not(unix))]
    assert!(!status.success());
    // Commits the child printed between our last read and the kill count too.
    reader.join().unwrap();
    for n in commits.try_iter() {
        seen += 1;
        last = n;
    }
    (last, seen)
}

#[test]
fn kill_9_loses_no_committed_row() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.rlmm");
    let mut written = 0;
    for (round, delay_us) in KILL_DELAYS_US.into_iter().enumerate() {
        let started = Instant::now();
        let delay = Duration::from_micros(delay_us);
        let (last_committed, commits) = run_and_kill(&path, written, delay);

        let storage = MemmapStorage::open(&path, MemmapOptions::default()).unwrap();
        let ring = storage.restored();
        let ids: &[i64] = bytemuck::cast_slice(storage.column(0));
        let xs: &[[f32; 3]] = bytemuck::cast_slice(storage.column(1));
        let tags = storage.column(2);
        assert!(ring.len > 0);
        let oldest = ids[ring.oldest(CAPACITY)];
        for i in 0..ring.len {
            let p = ring.position(i, CAPACITY);
            let id = ids[p];
            assert_eq!(id, oldest + i as i64, "ids are not consecutive at row {i}");
            assert_eq!(p as i64, id % CAPACITY as i64, "id {id} at position {p}");
            assert_eq!(xs[p], x_of(id), "row {id} is torn (x)");
            assert_eq!(tags[p], tag_of(id), "row {id} is torn (tag)");
        }
        let newest = oldest + ring.len as i64 - 1;
        assert_eq!(newest as u64 + 1, ring.written);
        assert!(
            newest as u64 + 1 >= last_committed,
            "newest id {newest} but the child had committed {last_committed} rows"
        );
        // Only the rows the interrupted write was overwriting left the ring.
        assert!(
            ring.len >= CAPACITY - MAX_CHUNK,
            "{} rows back, fewer than {}",
            ring.len,
            CAPACITY - MAX_CHUNK
        );
        println!(
            "round {}: killed {delay_us} us after the conditions, {commits} commits seen; reopened with {} rows (ids {oldest}..={newest}); \
             last commit seen {last_committed}; {} rows past it kept; {:.2?}",
            round + 1,
            ring.len,
            newest as u64 + 1 - last_committed,
            started.elapsed()
        );
        written = ring.written;
    }
}
