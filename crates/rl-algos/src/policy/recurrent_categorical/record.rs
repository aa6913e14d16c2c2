//! The summarizer state at the start of every chunk of a rollout, recorded while acting.

use rl_core::{Location, MemoryPlan};

use crate::error::{Error, Result};

/// The state a recurrent policy carried at the start of every chunk of the rollout it
/// collected: for chunk `c` (steps `c L .. (c + 1) L`) and environment `e`, the
/// summarizer's state before step `c L` ([`ChunkRecord::state`]) and whether that step
/// starts an episode ([`ChunkRecord::start`]). Training replays each chunk from there,
/// so the state carried while acting is the state replayed while training, bit for bit,
/// with `1 / L` of what storing a state per step would take: `steps / L x envs x
/// state_len` floats and as many flags.
///
/// Recording, rather than recomputing the states by replaying the rollout with the
/// weights that collected it: no extra pass over the rollout per update, and no
/// difference between acting's one-step products and a replay's batched ones.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkRecord {
    chunk_len: usize,
    steps: usize,
    envs: usize,
    state_len: usize,
    /// Steps acted since the record (re)started.
    acted: usize,
    /// `chunks x envs x state_len`.
    states: Vec<f32>,
    /// `chunks x envs`.
    starts: Vec<bool>,
}

impl ChunkRecord {
    /// An empty record for `steps` steps of `envs` environments cut into chunks of
    /// `chunk_len` steps, `state_len` floats per state.
    ///
    /// # Errors
    /// [`Error::Config`] for a `chunk_len` of 0 or one that does not divide `steps`, or
    /// no environments.
    pub fn new(chunk_len: usize, steps: usize, envs: usize, state_len: usize) -> Result<Self> {
        Self::check(chunk_len, steps, envs)?;
        let chunks = steps / chunk_len;
        Ok(Self {
            chunk_len,
            steps,
            envs,
            state_len,
            acted: 0,
            states: vec![0.0; chunks * envs * state_len],
            starts: vec![false; chunks * envs],
        })
    }

    /// Checks a chunk layout.
    ///
    /// # Errors
    /// As [`ChunkRecord::new`].
    pub fn check(chunk_len: usize, steps: usize, envs: usize) -> Result<()> {
        if chunk_len == 0 || steps == 0 || !steps.is_multiple_of(chunk_len) {
            return Err(Error::config(
                "chunk_len",
                format!(
                    "is {chunk_len}: it must be at least 1 and divide the rollout's {steps} steps (16 or 32 are usual)"
                ),
            ));
        }
        if envs == 0 {
            return Err(Error::config(
                "environments",
                "is 0: record at least one environment",
            ));
        }
        Ok(())
    }

    /// What [`ChunkRecord::new`] allocates, under `name`, before it exists.
    pub fn plan(
        name: &str,
        chunk_len: usize,
        steps: usize,
        envs: usize,
        state_len: usize,
    ) -> MemoryPlan {
        let chunks = steps / chunk_len.max(1);
        // Saturating: a plan of more bytes than fit in 64 bits is refused by any budget.
        let per_chunk = (state_len as u64)
            .saturating_mul(size_of::<f32>() as u64)
            .saturating_add(1);
        let bytes = (chunks as u64)
            .saturating_mul(envs as u64)
            .saturating_mul(per_chunk);
        MemoryPlan::new().with(
            format!("{name}/chunk starts ({chunks} chunks x {envs} envs x {state_len} floats)"),
            Location::Ram,
            bytes,
        )
    }

    /// Steps per chunk.
    pub fn chunk_len(&self) -> usize {
        self.chunk_len
    }

    /// Steps recorded in all (the rollout's).
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Chunks per environment.
    pub fn chunks(&self) -> usize {
        self.steps / self.chunk_len
    }

    /// Environments.
    pub fn envs(&self) -> usize {
        self.envs
    }

    /// Floats per state.
    pub fn state_len(&self) -> usize {
        self.state_len
    }

    /// Steps acted since the record started (at most [`ChunkRecord::steps`]).
    pub fn acted(&self) -> usize {
        self.acted
    }

    /// Whether every step of the rollout was acted.
    pub fn is_complete(&self) -> bool {
        self.acted == self.steps
    }

    /// Environment `env`'s state before the first step of chunk `chunk`.
    ///
    /// # Errors
    /// [`Error::Config`] for a chunk or environment out of range.
    pub fn state(&self, chunk: usize, env: usize) -> Result<&[f32]> {
        let at = self.index(chunk, env)?;
        Ok(&self.states[at * self.state_len..(at + 1) * self.state_len])
    }

    /// Whether environment `env`'s episode starts at the first step of chunk `chunk`.
    ///
    /// # Errors
    /// [`Error::Config`] for a chunk or environment out of range.
    pub fn start(&self, chunk: usize, env: usize) -> Result<bool> {
        Ok(self.starts[self.index(chunk, env)?])
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> u64 {
        (self.states.len() * size_of::<f32>() + self.starts.len()) as u64
    }

    fn index(&self, chunk: usize, env: usize) -> Result<usize> {
        if chunk >= self.chunks() || env >= self.envs {
            return Err(Error::config(
                "chunk record",
                format!(
                    "has {} chunks of {} environments; chunk {chunk} of environment {env} is not among them",
                    self.chunks(),
                    self.envs
                ),
            ));
        }
        Ok(chunk * self.envs + env)
    }

    /// Forgets what was recorded: the next step acted is the rollout's first.
    pub(super) fn restart(&mut self) {
        self.acted = 0;
    }

    /// Whether the next step acted starts a chunk (its state is recorded).
    pub(super) fn wants_snapshot(&self) -> bool {
        self.acted < self.steps && self.acted.is_multiple_of(self.chunk_len)
    }

    /// Counts one step acted; at a chunk's start, records every environment's state
    /// before it (`snapshot`, `envs x state_len`) and episode starts. Steps past the
    /// rollout's end are not recorded.
    pub(super) fn record(&mut self, starts: &[bool], snapshot: &[f32]) {
        if self.wants_snapshot() {
            let chunk = self.acted / self.chunk_len;
            let (n, len) = (self.envs, self.state_len);
            self.states[chunk * n * len..(chunk + 1) * n * len].copy_from_slice(snapshot);
            self.starts[chunk * n..(chunk + 1) * n].copy_from_slice(starts);
        }
        self.acted = (self.acted + 1).min(self.steps);
    }
}
