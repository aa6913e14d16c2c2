//! `cargo xtask bench storage`: replay-buffer write and sample throughput, with memory.
//!
//! Every configuration runs in its own process (peak RSS is per process): without
//! arguments this binary re-runs itself once per configuration and forwards the JSON
//! lines its children print:
//!
//! `{"bench":"storage","backend":"ram"|"memmap","op":"extend"|"sample","obs_dim":D,
//!   "capacity":C,"batch":256,"rows_per_s":X,"peak_rss_bytes":Y,"rss_anon_bytes":A,
//!   "rss_file_bytes":F}`
//!
//! Transition rows: `obs f32[D], action u32, reward f32, terminated, truncated,
//! next_obs f32[D]` (next_obs stored, for comparability with other libraries). Extend
//! writes chunks of 1024 rows, timed over whole wraps of an already filled buffer (pages
//! resident), validation on; sample draws uniform batches of 256. Each figure is the median
//! over 5 processes of the median over 7 rounds, on one thread.
//!
//! `--atari` fills a 1M-row Atari-shaped memmap buffer (84x84 u8 frames, each stored
//! once, stacks of 4 rebuilt at sample time) and samples DQN batches of 32 from it:
//! `{"bench":"storage","backend":"memmap","shape":"atari","op":"extend"|"sample",
//! "rows_per_s":X,"file_bytes":B,"rss_anon_bytes":A,"rss_file_bytes":F}`.
//!
//! `--big` runs the larger-than-RAM check instead: a 32 GiB sparse memmap buffer, 8 GiB
//! filled, sampled while anonymous memory stays small.
//!
//! Without arguments it also measures what commits cost: extend into a memmap buffer
//! (D = 4, 1M rows, chunks of 1024) with a commit every 1024, 65 536 and 1 048 576 rows,
//! timed over whole wraps (median over 3 processes of the median over 5 wraps):
//! `{"bench":"storage","backend":"memmap","op":"extend_commit","obs_dim":4,
//!   "capacity":1000000,"chunk":1024,"commit_every":N,"rows_per_s":X}`;
//! and a soak: 10 million steps of 64 CartPole environments through the synchronous
//! collector into a 500 000-row memmap replay buffer, committing after every 100 032
//! steps, with the resident memory after every million steps and the spread after the
//! first million: `{"bench":"storage","backend":"memmap","run":"soak","env_steps":S,
//! "commits":C,"rss_spread_after_first_million_bytes":B}`.

use std::time::{Duration, Instant};

use anyhow::bail;
use rl_collect::{CollectorConfig, ConstantPolicy, SyncCollector};
use rl_core::{DType, Flag, ProcessMemory, Schema, TransitionSchema};
use rl_envs::CartPole;
use rl_storage::{
    Batch, ColumnSlice,
    dedup::DedupReplay,
    memmap::{MemmapOptions, MemmapStorage},
    ram::RamStorage,
    replay::ReplayBuffer,
    sampler::Uniform,
    storage::HostStorage,
};

mod common;

const CHUNK: usize = 1024;
const BATCH: usize = 256;
const ROUNDS: usize = 7;
const CONFIGS: [(usize, usize); 2] = [(4, 1_000_000), (1024, 200_000)];

fn main() -> anyhow::Result<()> {
    match common::args().as_slice() {
        [] => run_all(),
        [flag] if flag == "--big" => big(),
        [flag] if flag == "--atari" => atari(),
        [flag] if flag == "--soak" => soak(),
        [flag, every] if flag == "--commits" => extend_commit(every.parse()?),
        [flag, backend, dim, capacity] if flag == "--config" => {
            let (dim, capacity) = (dim.parse()?, capacity.parse()?);
            one_config(backend, dim, capacity)
        }
        other => bail!(
            "unknown arguments {other:?}: use no arguments, --big, --atari, --soak, \
             --commits ROWS, or --config BACKEND DIM CAPACITY"
        ),
    }
}

/// Processes per configuration: figures vary more between processes (page placement,
/// huge pages) than between rounds of one process, so the median is taken over both.
const PROCESSES: usize = 5;

/// Runs every configuration in child processes of its own and prints, per figure, the
/// line of the process with the median rate.
fn run_all() -> anyhow::Result<()> {
    for backend in ["ram", "memmap"] {
        for (dim, capacity) in CONFIGS {
            let args =
                ["--config", backend, &dim.to_string(), &capacity.to_string()].map(String::from);
            let lines = common::run_children(&args, PROCESSES)?;
            for op in ["extend", "sample"] {
                let runs: Vec<&serde_json::Value> =
                    lines.iter().filter(|l| l["op"] == op).collect();
                if let Some(line) = common::median_line(&runs, "rows_per_s") {
                    println!("{line}");
                }
            }
        }
    }
    for every in COMMIT_EVERY {
        let lines = common::run_children(&["--commits".to_owned(), every.to_string()], 3)?;
        let all: Vec<&serde_json::Value> = lines.iter().collect();
        if let Some(line) = common::median_line(&all, "rows_per_s") {
            println!("{line}");
        }
    }
    for line in common::run_children(&["--soak".to_owned()], 1)? {
        println!("{line}");
    }
    Ok(())
}

/// Rows between commits in the `extend_commit` lines.
const COMMIT_EVERY: [usize; 3] = [1 << 10, 1 << 16, 1 << 20];

/// Extend into a 1M-row memmap buffer (D = 4) with a commit every `every` rows, timed
/// over whole wraps of the filled buffer.
fn extend_commit(every: usize) -> anyhow::Result<()> {
    const DIM: usize = 4;
    const CAPACITY: usize = 1_000_000;
    const WRAPS: usize = 5;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("commits.rl");
    let storage = MemmapStorage::create(
        &path,
        transition_schema(DIM)?,
        CAPACITY,
        MemmapOptions::default(),
    )?;
    let mut buffer = ReplayBuffer::new(storage, Uniform::new(0));
    let chunk = Chunk::new(DIM);
    let columns = chunk.columns();
    let chunks = CAPACITY.div_ceil(CHUNK);
    let mut since_commit = 0usize;
    let mut wrap = |buffer: &mut ReplayBuffer<MemmapStorage, Uniform>| -> anyhow::Result<()> {
        for _ in 0..chunks {
            buffer.extend(&columns)?;
            since_commit += CHUNK;
            if since_commit >= every {
                buffer.commit()?;
                since_commit = 0;
            }
        }
        Ok(())
    };
    wrap(&mut buffer)?;
    let mut rates = Vec::with_capacity(WRAPS);
    for _ in 0..WRAPS {
        let start = Instant::now();
        wrap(&mut buffer)?;
        rates.push((chunks * CHUNK) as f64 / start.elapsed().as_secs_f64());
    }
    let line = serde_json::json!({
        "bench": "storage",
        "backend": "memmap",
        "op": "extend_commit",
        "obs_dim": DIM,
        "capacity": CAPACITY,
        "chunk": CHUNK,
        "commit_every": every,
        "rows_per_s": common::median(&mut rates).round(),
    });
    println!("{line}");
    Ok(())
}

/// Ten million collector steps (64 CartPole environments, constant policy) into a
/// 500 000-row memmap replay buffer, committing after every batch of 100 032 steps; the
/// resident memory after every million steps, then its spread after the first million.
fn soak() -> anyhow::Result<()> {
    const ENVS: usize = 64;
    const STEPS: u64 = 10_000_000;
    const MILLION: u64 = 1_000_000;
    const BATCH: usize = ENVS * 1563;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("soak.rl");
    let storage = MemmapStorage::create(
        &path,
        transition_schema(4)?,
        500_000,
        MemmapOptions::default(),
    )?;
    let mut replay = ReplayBuffer::new(storage, Uniform::new(0));
    let envs: Vec<CartPole> = (0..ENVS as u64).map(CartPole::new).collect();
    let config = CollectorConfig {
        total_frames: Some(STEPS),
        ..CollectorConfig::new(BATCH)
    };
    let mut collector = SyncCollector::new(envs, ConstantPolicy::new(&[1u32]), config)?;
    let mut commits = 0u64;
    let mut next_report = MILLION;
    let mut after_first = Vec::new();
    let start = Instant::now();
    while collector.frames() < STEPS {
        collector.collect(&mut replay)?;
        replay.commit()?;
        commits += 1;
        if collector.frames() >= next_report {
            let memory = ProcessMemory::read()?;
            let line = serde_json::json!({
                "bench": "storage",
                "backend": "memmap",
                "run": "soak",
                "env_steps": collector.frames(),
                "rss_bytes": memory.rss_bytes,
                "rss_anon_bytes": memory.rss_anon_bytes,
                "rss_file_bytes": memory.rss_file_bytes,
            });
            println!("{line}");
            if next_report > MILLION {
                after_first.push(memory.rss_bytes);
            }
            next_report += MILLION;
        }
    }
    let spread = after_first.iter().max().unwrap_or(&0) - after_first.iter().min().unwrap_or(&0);
    let line = serde_json::json!({
        "bench": "storage",
        "backend": "memmap",
        "run": "soak",
        "env_steps": collector.frames(),
        "commits": commits,
        "env_steps_per_s": (collector.frames() as f64 / start.elapsed().as_secs_f64()).round(),
        "rss_spread_after_first_million_bytes": spread,
    });
    println!("{line}");
    Ok(())
}

fn transition_schema(dim: usize) -> anyhow::Result<Schema> {
    Ok(TransitionSchema::new(DType::F32, &[dim], DType::U32, &[])
        .with_next_obs()
        .build()?)
}

/// One chunk of transitions, reused for every write.
struct Chunk {
    obs: Vec<f32>,
    action: Vec<u32>,
    reward: Vec<f32>,
    terminated: Vec<Flag>,
    truncated: Vec<Flag>,
    next_obs: Vec<f32>,
}

impl Chunk {
    fn new(dim: usize) -> Self {
        let obs: Vec<f32> = (0..CHUNK * dim).map(|i| (i % 251) as f32 * 0.01).collect();
        Self {
            next_obs: obs.iter().map(|v| v + 0.5).collect(),
            obs,
            action: (0..CHUNK as u32).map(|i| i % 7).collect(),
            reward: (0..CHUNK).map(|i| (i % 3) as f32).collect(),
            terminated: (0..CHUNK).map(|i| Flag::new(i % 200 == 199)).collect(),
            truncated: (0..CHUNK).map(|i| Flag::new(i % 500 == 499)).collect(),
        }
    }

    fn columns(&self) -> [ColumnSlice<'_>; 6] {
        [
            (&self.obs).into(),
            (&self.action).into(),
            (&self.reward).into(),
            (&self.terminated).into(),
            (&self.truncated).into(),
            (&self.next_obs).into(),
        ]
    }
}

fn one_config(backend: &str, dim: usize, capacity: usize) -> anyhow::Result<()> {
    let schema = transition_schema(dim)?;
    match backend {
        "ram" => measure(
            backend,
            dim,
            capacity,
            RamStorage::new(schema, capacity, None)?,
        ),
        "memmap" => {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join("replay.rl");
            let storage = MemmapStorage::create(&path, schema, capacity, MemmapOptions::default())?;
            measure(backend, dim, capacity, storage)
        }
        other => bail!("unknown backend `{other}`: use ram or memmap"),
    }
}

fn measure<S: HostStorage>(
    backend: &str,
    dim: usize,
    capacity: usize,
    storage: S,
) -> anyhow::Result<()> {
    let schema = storage.schema().clone();
    let mut buffer = ReplayBuffer::new(storage, Uniform::new(0));
    let chunk = Chunk::new(dim);
    let columns = chunk.columns();
    let wrap = |buffer: &mut ReplayBuffer<S, Uniform>| -> anyhow::Result<()> {
        for _ in 0..capacity.div_ceil(CHUNK) {
            buffer.extend(&columns)?;
        }
        Ok(())
    };
    // Fill once so every page is resident, then time whole wraps.
    wrap(&mut buffer)?;
    let mut rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        wrap(&mut buffer)?;
        rates.push((capacity.div_ceil(CHUNK) * CHUNK) as f64 / start.elapsed().as_secs_f64());
    }
    report(backend, "extend", dim, capacity, common::median(&mut rates))?;

    let mut batch = Batch::new(&schema, BATCH)?;
    let per_round = Duration::from_millis(400);
    rates.clear();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut rows = 0usize;
        while start.elapsed() < per_round {
            for _ in 0..64 {
                buffer.sample(&mut batch)?;
            }
            rows += 64 * BATCH;
        }
        rates.push(rows as f64 / start.elapsed().as_secs_f64());
    }
    std::hint::black_box(&batch);
    report(backend, "sample", dim, capacity, common::median(&mut rates))
}

fn report(
    backend: &str,
    op: &str,
    dim: usize,
    capacity: usize,
    rows_per_s: f64,
) -> anyhow::Result<()> {
    let memory = ProcessMemory::read()?;
    let line = serde_json::json!({
        "bench": "storage",
        "backend": backend,
        "op": op,
        "obs_dim": dim,
        "capacity": capacity,
        "batch": BATCH,
        "rows_per_s": rows_per_s.round(),
        "peak_rss_bytes": memory.peak_rss_bytes,
        "rss_anon_bytes": memory.rss_anon_bytes,
        "rss_file_bytes": memory.rss_file_bytes,
    });
    println!("{line}");
    Ok(())
}

/// A memmap buffer larger than this machine's RAM: 32 GiB of capacity in a sparse file,
/// 8 GiB written, then sampled; anonymous memory must stay small throughout.
fn big() -> anyhow::Result<()> {
    const DIM: usize = 1024;
    let row_bytes = transition_schema(DIM)?.row_bytes();
    let capacity = (32usize << 30) / row_bytes;
    let fill = (8usize << 30) / row_bytes;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("big.rl");
    let storage = MemmapStorage::create(
        &path,
        transition_schema(DIM)?,
        capacity,
        MemmapOptions::default(),
    )?;
    let mut buffer = ReplayBuffer::new(storage, Uniform::new(1));
    let chunk = Chunk::new(DIM);
    let columns = chunk.columns();
    let mut peak_anon = 0u64;
    let start = Instant::now();
    let mut written = 0;
    while written < fill {
        buffer.extend(&columns)?;
        written += CHUNK;
        if written.is_multiple_of(64 * CHUNK) {
            buffer.commit()?;
            peak_anon = peak_anon.max(ProcessMemory::read()?.rss_anon_bytes);
        }
    }
    buffer.commit()?;
    let fill_s = start.elapsed().as_secs_f64();
    let memory = ProcessMemory::read()?;
    big_report(
        "extend",
        written as f64 / fill_s,
        capacity,
        written,
        peak_anon.max(memory.rss_anon_bytes),
        &memory,
        &path,
    )?;
    let mut batch = Batch::new(buffer.schema(), BATCH)?;
    let start = Instant::now();
    let mut rows = 0usize;
    while start.elapsed() < Duration::from_secs(20) {
        buffer.sample(&mut batch)?;
        rows += BATCH;
        if rows.is_multiple_of(256 * BATCH) {
            peak_anon = peak_anon.max(ProcessMemory::read()?.rss_anon_bytes);
        }
    }
    let memory = ProcessMemory::read()?;
    big_report(
        "sample",
        rows as f64 / start.elapsed().as_secs_f64(),
        capacity,
        written,
        peak_anon.max(memory.rss_anon_bytes),
        &memory,
        &path,
    )
}

fn big_report(
    op: &str,
    rows_per_s: f64,
    capacity: usize,
    rows: usize,
    peak_anon: u64,
    memory: &ProcessMemory,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let file_bytes = std::fs::metadata(path)?.len();
    let line = serde_json::json!({
        "bench": "storage",
        "backend": "memmap",
        "shape": "big",
        "op": op,
        "obs_dim": 1024,
        "capacity": capacity,
        "rows": rows,
        "batch": BATCH,
        "rows_per_s": rows_per_s.round(),
        "file_bytes": file_bytes,
        "peak_rss_bytes": memory.peak_rss_bytes,
        "rss_anon_bytes": memory.rss_anon_bytes,
        "peak_rss_anon_bytes": peak_anon,
        "rss_file_bytes": memory.rss_file_bytes,
    });
    println!("{line}");
    Ok(())
}

/// A 1M-row Atari-shaped buffer: 84x84 u8 frames stored once (next observations and
/// stacks of 4 rebuilt from indices at sample time), in a memmap file.
fn atari() -> anyhow::Result<()> {
    const ROWS: usize = 1_000_000;
    const FRAME: usize = 84 * 84;
    const STACK: usize = 4;
    const DQN_BATCH: usize = 32;
    const EPISODE: usize = 1000;
    let transition = TransitionSchema::new(DType::U8, &[84, 84], DType::U32, &[]).build()?;
    let schema = DedupReplay::<MemmapStorage>::schema(transition.columns().to_vec())?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("atari.rl");
    let storage = MemmapStorage::create(&path, schema, ROWS, MemmapOptions::default())?;
    let mut buffer = DedupReplay::new(storage, Uniform::new(2))?.with_frame_stack(STACK)?;
    // A few distinct frames, cycled: generating pixels is not what is measured.
    let frames: Vec<Vec<u8>> = (0..16u8)
        .map(|k| (0..FRAME).map(|i| (i as u8).wrapping_mul(k)).collect())
        .collect();
    let start = Instant::now();
    let mut rows = 0usize;
    let mut step = 0usize;
    while buffer.buffer().ring().written < ROWS as u64 {
        let t = step % EPISODE;
        let last = t + 1 == EPISODE;
        let frame = &frames[step % 16];
        let (terminated, truncated) = (
            [Flag::new(last && step.is_multiple_of(2))],
            [Flag::new(last && !step.is_multiple_of(2))],
        );
        let action = [(step % 6) as u32];
        let row = [
            ColumnSlice::from(&frame[..]),
            (&action).into(),
            (&[1.0f32]).into(),
            (&terminated).into(),
            (&truncated).into(),
        ];
        let final_frame = last.then(|| ColumnSlice::from(&frames[(step + 1) % 16][..]));
        buffer.push_step(&row, final_frame)?;
        rows += 1 + usize::from(last);
        step += 1;
        if step.is_multiple_of(100_000) {
            buffer.commit()?;
        }
    }
    buffer.commit()?;
    atari_report("extend", rows as f64 / start.elapsed().as_secs_f64(), &path)?;
    let mut batch = Batch::new(buffer.batch_schema(), DQN_BATCH)?;
    let start = Instant::now();
    let mut sampled = 0usize;
    let mut peak_anon = 0u64;
    while start.elapsed() < Duration::from_secs(10) {
        buffer.sample(&mut batch)?;
        sampled += DQN_BATCH;
        if sampled.is_multiple_of(DQN_BATCH * 4096) {
            peak_anon = peak_anon.max(ProcessMemory::read()?.rss_anon_bytes);
        }
    }
    std::hint::black_box(&batch);
    let rate = sampled as f64 / start.elapsed().as_secs_f64();
    atari_report("sample", rate, &path)?;
    let stacked = (ROWS * 2 * STACK * FRAME) as u64;
    let line = serde_json::json!({
        "bench": "storage",
        "backend": "memmap",
        "shape": "atari",
        "op": "summary",
        "rows": ROWS,
        "frame_stack": STACK,
        "file_bytes": std::fs::metadata(&path)?.len(),
        "stored_stacks_bytes": stacked,
        "peak_rss_anon_bytes_while_sampling": peak_anon,
    });
    println!("{line}");
    Ok(())
}

fn atari_report(op: &str, rows_per_s: f64, path: &std::path::Path) -> anyhow::Result<()> {
    let memory = ProcessMemory::read()?;
    let line = serde_json::json!({
        "bench": "storage",
        "backend": "memmap",
        "shape": "atari",
        "op": op,
        "rows_per_s": rows_per_s.round(),
        "file_bytes": std::fs::metadata(path)?.len(),
        "rss_anon_bytes": memory.rss_anon_bytes,
        "rss_file_bytes": memory.rss_file_bytes,
    });
    println!("{line}");
    Ok(())
}
