//! A full disk on a real small file system: a 1 MiB tmpfs.
//!
//! Each test re-runs this binary as a child inside a private mount namespace (`unshare`,
//! so nothing outside the child ever sees the mount), with the tmpfs mounted on a fresh
//! folder, and asserts that the child exited normally: a child killed by a signal (a
//! `SIGBUS` is what a write into a sparse file on a full disk gets) fails the test. The
//! child makes its own checks on the small disk and reports with a last `done` line.
//!
//! Where no small file system can be mounted (no `unshare`, user namespaces disabled,
//! `EPERM`), each test prints a `skipped: ...` line to stderr and passes. Only the mount
//! decides that: once a probe has mounted the tmpfs, anything that fails is a failure.

#![cfg(target_os = "linux")]
#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

use std::io::{ErrorKind, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rl_core::{Column, DType, Location, Schema};
use rl_storage::{
    Error,
    memmap::{Fallback, MemmapOptions, MemmapStorage},
    storage::{HostStorage, RingState, Storage},
};

/// Set in the child to the case it runs ([`TOO_LARGE`] or [`FILL`]).
const CHILD_ENV: &str = "RL_DISK_FULL_CHILD";
/// Set in the child to the folder the tmpfs is mounted on.
const DIR_ENV: &str = "RL_DISK_FULL_DIR";
/// The test the child runs.
const CHILD_TEST: &str = "child_on_a_small_disk";
const TOO_LARGE: &str = "too-large";
const FILL: &str = "fill";
/// The size of the file system.
const DISK_BYTES: u64 = 1 << 20;
/// Rows per write and per commit in the child that fills the disk.
const CHUNK: usize = 1000;

/// The ways to get a private tmpfs, tried in order: a user namespace with a mount
/// namespace (unprivileged, where user namespaces are allowed), then a mount namespace
/// alone (root).
const UNSHARE: [&[&str]; 2] = [&["--user", "--map-root-user", "--mount"], &["--mount"]];
/// Mounts the tmpfs on `$1`; with more arguments, runs them there (`exec`: the child is
/// this very process, so its exit status, signal included, is what the parent sees).
const MOUNT: &str =
    r#"mount -t tmpfs -o size=1m none "$1" || exit 97; shift; [ "$#" -eq 0 ] || exec "$@""#;

fn schema() -> Schema {
    Schema::new([
        Column::scalar("id", DType::I64),
        Column::new("x", DType::F32, &[3]),
    ])
    .unwrap()
}

fn x_of(id: i64) -> [f32; 3] {
    [id as f32, -(id as f32), (id % 7) as f32]
}

fn file_bytes(capacity: usize) -> u64 {
    MemmapStorage::plan(&schema(), capacity)
        .unwrap()
        .total(Location::File)
}

/// The largest capacity whose file takes at most `bytes`.
fn capacity_within(bytes: u64) -> usize {
    let (mut fits, mut too_many) = (1, bytes as usize + 1);
    assert!(
        file_bytes(fits) <= bytes,
        "not even one row fits in {bytes} bytes"
    );
    while too_many - fits > 1 {
        let middle = fits + (too_many - fits) / 2;
        if file_bytes(middle) <= bytes {
            fits = middle;
        } else {
            too_many = middle;
        }
    }
    fits
}

/// The `unshare` arguments that mount a tmpfs here, or why none does.
fn mounting_unshare(dir: &Path) -> Result<&'static [&'static str], String> {
    let mut failures = Vec::new();
    for args in UNSHARE {
        let probe = Command::new("unshare")
            .args(args)
            .args(["sh", "-c", MOUNT, "sh"])
            .arg(dir)
            .stdin(Stdio::null())
            .output();
        match probe {
            Ok(output) if output.status.success() => return Ok(args),
            Ok(output) => failures.push(format!(
                "`unshare {}`: {} ({})",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim(),
                output.status
            )),
            Err(error) => return Err(format!("cannot run `unshare`: {error}")),
        }
    }
    Err(failures.join("; "))
}

/// Runs [`CHILD_TEST`] on a fresh 1 MiB tmpfs with `case`, and returns what it printed;
/// `None` (after saying so on stderr) where no tmpfs can be mounted.
fn run_on_a_small_disk(case: &str) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let unshare = match mounting_unshare(dir.path()) {
        Ok(args) => args,
        Err(why) => {
            eprintln!("skipped: cannot mount a 1 MiB tmpfs to test a full disk: {why}");
            return None;
        }
    };
    let output = Command::new("unshare")
        .args(unshare)
        .args(["sh", "-c", MOUNT, "sh"])
        .arg(dir.path())
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, case)
        .env(DIR_ENV, dir.path())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("{printed}");
    assert_eq!(
        output.status.signal(),
        None,
        "the child ({case}) was killed by signal {:?} (7 is SIGBUS on x86 and Arm); it printed:\n{printed}",
        output.status.signal()
    );
    assert_ne!(
        output.status.code(),
        Some(97),
        "the tmpfs mounted for the probe but not for the child"
    );
    assert!(
        output.status.success(),
        "the child ({case}) failed: {}; it printed:\n{printed}",
        output.status
    );
    Some(printed)
}

#[test]
fn a_buffer_larger_than_the_disk_is_a_typed_error_and_leaves_no_file() {
    if let Some(printed) = run_on_a_small_disk(TOO_LARGE) {
        assert!(printed.contains("done: NoSpace"), "{printed}");
    }
}

#[test]
fn a_writer_that_almost_fills_the_disk_runs_to_the_end() {
    if let Some(printed) = run_on_a_small_disk(FILL) {
        let done = printed
            .lines()
            .find_map(|line| line.strip_prefix("done: written "))
            .unwrap_or_else(|| panic!("the child did not finish: {printed}"));
        let written: u64 = done.split_whitespace().next().unwrap().parse().unwrap();
        assert!(written > 100_000, "{printed}");
    }
}

/// Free and total bytes of the file system at `dir`, checking it is the small tmpfs.
fn small_disk(dir: &Path) -> (u64, u64) {
    let stat = rustix::fs::statvfs(dir).unwrap();
    let total = stat.f_blocks * stat.f_frsize;
    assert_eq!(
        total,
        DISK_BYTES,
        "{} is not the 1 MiB tmpfs",
        dir.display()
    );
    (stat.f_bavail * stat.f_frsize, total)
}

/// The child: runs one case on the tmpfs at `$RL_DISK_FULL_DIR`. Returns at once when
/// not started by a parent test.
#[test]
fn child_on_a_small_disk() {
    let (Some(case), Some(dir)) = (std::env::var_os(CHILD_ENV), std::env::var_os(DIR_ENV)) else {
        return;
    };
    let dir = PathBuf::from(dir);
    match case.to_str() {
        Some(TOO_LARGE) => too_large(&dir),
        Some(FILL) => fill(&dir),
        other => panic!("unknown case {other:?}"),
    }
}

/// A buffer twice the disk is `Error::NoSpace`, leaves nothing, and the next `create` at
/// the same path (of a buffer that fits) succeeds.
fn too_large(dir: &Path) {
    let (free, total) = small_disk(dir);
    assert_eq!(free, total, "the tmpfs is not empty");
    let path = dir.join("big.rlmm");
    let capacity = capacity_within(2 * DISK_BYTES);
    let needed = file_bytes(capacity);
    let err = MemmapStorage::create(&path, schema(), capacity, MemmapOptions::default())
        .map(drop)
        .unwrap_err();
    let message = err.to_string();
    let Error::NoSpace {
        path: named,
        needed: reported,
        source,
    } = err
    else {
        panic!("expected Error::NoSpace, got {err:?}");
    };
    assert_eq!(named, path);
    assert_eq!(reported, needed);
    assert_eq!(source.kind(), ErrorKind::StorageFull);
    for words in [
        path.to_str().unwrap(),
        &needed.to_string(),
        "free space",
        "lower the capacity",
        "another folder",
    ] {
        assert!(message.contains(words), "`{words}` missing: {message}");
    }
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "a failed create left {left:?}");
    assert_eq!(
        small_disk(dir).0,
        total,
        "the failed create still holds space"
    );

    let fits = capacity_within(DISK_BYTES / 2);
    let storage = MemmapStorage::create(&path, schema(), fits, MemmapOptions::default()).unwrap();
    assert_eq!(storage.capacity(), fits);
    println!("done: NoSpace for {needed} bytes, then {fits} rows created");
}

/// A buffer that takes the whole disk but 16 KiB, then a file that takes the rest of
/// it, then three laps of 1000-row writes, each committed: nothing kills the process,
/// and the last lap comes back whole.
fn fill(dir: &Path) {
    let (free, _) = small_disk(dir);
    let path = dir.join("full.rlmm");
    let capacity = capacity_within(free - (16 << 10));
    let mut storage =
        MemmapStorage::create(&path, schema(), capacity, MemmapOptions::default()).unwrap();

    // Another writer takes every block left: with a sparse buffer file, the rows below
    // would find no block to land in.
    let mut hog = std::fs::File::create(dir.join("hog")).unwrap();
    let page = [0xA5u8; 4096];
    let mut hogged = 0u64;
    let full = loop {
        match hog.write(&page).and_then(|n| hog.sync_data().map(|()| n)) {
            Ok(n) => hogged += n as u64,
            Err(error) => break error,
        }
    };
    assert_eq!(full.kind(), ErrorKind::StorageFull, "{full}");
    assert_eq!(small_disk(dir).0, 0, "the disk is not full");
    println!("buffer of {capacity} rows; another file took {hogged} bytes; the disk is full");

    let mut ring = storage.restored();
    let mut commits = 0;
    while ring.written < 3 * capacity as u64 {
        let rows = CHUNK.min(capacity);
        storage.prepare_write(&ring, rows).unwrap();
        for j in 0..rows {
            let position = (ring.cursor + j) % capacity;
            let id = (ring.written + j as u64) as i64;
            bytemuck::cast_slice_mut::<u8, i64>(storage.column_mut(0))[position] = id;
            bytemuck::cast_slice_mut::<u8, [f32; 3]>(storage.column_mut(1))[position] = x_of(id);
        }
        ring = RingState {
            cursor: (ring.cursor + rows) % capacity,
            len: (ring.len + rows).min(capacity),
            written: ring.written + rows as u64,
            ..ring
        };
        storage.commit(&ring).unwrap();
        commits += 1;
    }
    drop(storage);

    let strict = MemmapOptions {
        fallback: Fallback::Refuse,
    };
    let storage = MemmapStorage::open_with(&path, &schema(), capacity, strict).unwrap();
    assert_eq!(storage.restored(), ring);
    let ids: &[i64] = bytemuck::cast_slice(storage.column(0));
    let xs: &[[f32; 3]] = bytemuck::cast_slice(storage.column(1));
    for i in 0..ring.len {
        let position = ring.position(i, capacity);
        let id = (ring.written - ring.len as u64 + i as u64) as i64;
        assert_eq!(ids[position], id, "row {i} of the last lap");
        assert_eq!(xs[position], x_of(id), "row {i} of the last lap is torn");
    }
    println!("done: written {} rows in {commits} commits", ring.written);
}
