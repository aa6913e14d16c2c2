//! The summarizer a recurrent policy runs, chosen at run time among `rl-history`'s, with
//! the two things training adds to acting: a snapshot of each environment's state (what
//! a rollout records at every chunk's start) and the replay of a window of steps from
//! such snapshots, with resets where episodes start (what training runs).

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Location, MemoryPlan};
use rl_history::{Identity, IdentityState, Padding, Stack, StackState, Summarizer};
use rl_nn::{LstmState, LstmWorkspace, Sequence, SequenceGrads};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::learner::Sizes;
use crate::policy::check_len;

/// Offsets the LSTM's initialisation seed from the heads', keeping the streams apart.
const LSTM_SEED_OFFSET: u64 = 0x6C73_746D_5EED_0001;

/// What a recurrent policy remembers of each environment's past, chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum History {
    /// Nothing: the heads see the last observation (`rl_history::Identity`), the
    /// feed-forward baseline.
    None,
    /// The last `k` observations stacked (`rl_history::Stack`, padded with the episode's
    /// first observation), `k` at least 1.
    Stack {
        /// Observations per stack.
        k: usize,
    },
    /// An LSTM cell of `hidden` units (`rl_history::Lstm`) shared by the actor and the
    /// critic; its `h` is their input.
    Lstm {
        /// Units of `h` and `c`, at least 1.
        hidden: usize,
    },
}

impl History {
    /// Checks the sizes.
    ///
    /// # Errors
    /// [`Error::Config`] for a `k` or `hidden` of 0, naming `history.stack.k` or
    /// `history.lstm.hidden` (its owner puts them under its own name with
    /// [`Error::within`]).
    pub fn validate(&self) -> Result<()> {
        match *self {
            History::Stack { k: 0 } => Err(Error::config(
                "history.stack.k",
                "is 0: stack at least one observation (k = 1 is no history)",
            )),
            History::Lstm { hidden: 0 } => Err(Error::config(
                "history.lstm.hidden",
                "is 0: give the LSTM at least one unit (64 is usual)",
            )),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            History::None => write!(f, "none"),
            History::Stack { k } => write!(f, "stack of {k}"),
            History::Lstm { hidden } => write!(f, "lstm of {hidden}"),
        }
    }
}

/// A summarizer by size alone: what it outputs and keeps per environment, what its LSTM
/// holds, from its [`History`] and the observation length before it exists. Plans read
/// it; a [`Summary`] is built from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SummaryShape {
    pub(crate) history: History,
    pub(crate) obs_len: usize,
    /// Elements of one environment's features.
    pub(crate) output_len: usize,
    /// Floats of one environment's snapshot ([`Summary::state_len`]).
    pub(crate) state_len: usize,
    /// The LSTM's parameters (0 without one).
    pub(crate) cell_params: usize,
    /// Bytes of one environment's acting state.
    state_bytes: u64,
}

impl SummaryShape {
    /// The summarizer `history` over observations of `obs_len` elements.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `history`, an `obs_len` of 0 or sizes that
    /// overflow (naming `recurrent.history`).
    pub(crate) fn new(history: History, obs_len: usize) -> Result<Self> {
        history.validate()?;
        if obs_len == 0 {
            return Err(Error::config(
                "observation space",
                "has 0 elements: a summarizer needs at least 1",
            ));
        }
        let sizes = Sizes::of("recurrent.history");
        let (output_len, state_len, cell_params, state_bytes) = match history {
            History::None => (obs_len, 0, 0, 0),
            History::Stack { k } => (
                sizes.count(&[k, obs_len])?,
                sizes.count(&[k - 1, obs_len])?,
                0,
                sizes.checked(Stack::state_bytes_for(obs_len, k, 1))?,
            ),
            History::Lstm { hidden } => (
                hidden,
                sizes.count(&[2, hidden])?,
                sizes.checked(rl_nn::Lstm::checked_params_for(obs_len, hidden))?,
                sizes.checked(rl_nn::Lstm::state_bytes_for(hidden, 1))?,
            ),
        };
        Ok(Self {
            history,
            obs_len,
            output_len,
            state_len,
            cell_params,
            state_bytes,
        })
    }

    /// Bytes of one environment's acting state ([`Summary::state`] is that many per
    /// environment).
    pub(crate) fn state_bytes_per_env(&self) -> u64 {
        self.state_bytes
    }

    /// [`Summary::state_plan`]'s line name for `envs` environments, cut around the count.
    pub(crate) fn state_line(&self, name: &str) -> (String, String) {
        (
            format!("{name}/{} state (", self.history),
            " envs)".to_owned(),
        )
    }

    /// What acting with `envs` environments holds, under `name`.
    ///
    /// # Errors
    /// [`Error::Config`] (from `sizes`) when the bytes overflow.
    pub(crate) fn state_plan(&self, name: &str, envs: usize, sizes: Sizes) -> Result<MemoryPlan> {
        let (before, after) = self.state_line(name);
        let bytes = sizes.checked(self.state_bytes.checked_mul(envs as u64))?;
        Ok(MemoryPlan::new().with(format!("{before}{envs}{after}"), Location::Ram, bytes))
    }

    /// Bytes of [`Summary::replay_workspace`] for windows of `max_steps x max_rows`.
    ///
    /// # Errors
    /// [`Error::Config`] (from `sizes`) when the bytes overflow.
    pub(crate) fn replay_workspace_bytes(
        &self,
        max_steps: usize,
        max_rows: usize,
        sizes: Sizes,
    ) -> Result<u64> {
        match self.history {
            History::Lstm { hidden } => sizes.sum(&[
                sizes.checked(rl_nn::Lstm::sequence_workspace_bytes_for(
                    self.obs_len,
                    hidden,
                    max_steps,
                    max_rows,
                ))?,
                sizes.f32s(&[2, max_rows, hidden])?,
            ]),
            _ => sizes.f32s(&[max_steps, max_rows, self.output_len]),
        }
    }
}

/// One of `rl-history`'s summarizers.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Summary {
    None(Identity),
    Stack(Stack),
    Lstm(rl_history::Lstm),
}

/// The acting state of a [`Summary`] for a batch of environments.
#[derive(Debug)]
pub(crate) enum SummaryState {
    None(IdentityState),
    Stack(StackState),
    Lstm(LstmState),
}

/// Scratch of [`Summary::replay`] for windows of up to `max_steps x max_rows`.
#[derive(Clone, Debug)]
pub(crate) struct ReplayWorkspace {
    max_steps: usize,
    max_rows: usize,
    /// The features of the last window (identity and stacks; the LSTM's live in `lstm`).
    features: Vec<f32>,
    /// The LSTM's window workspace and initial states, `max_rows x hidden` each.
    lstm: Option<(LstmWorkspace, Vec<f32>, Vec<f32>)>,
}

impl ReplayWorkspace {
    pub(crate) fn memory_bytes(&self) -> u64 {
        let floats = self.features.len()
            + self
                .lstm
                .as_ref()
                .map_or(0, |(_, h0, c0)| h0.len() + c0.len());
        (floats * size_of::<f32>()) as u64
            + self.lstm.as_ref().map_or(0, |(ws, ..)| ws.memory_bytes())
    }
}

/// A window replayed by [`Summary::replay`]: `steps x rows` observations (time-major),
/// `steps x rows` reset flags, and each row's state before the first step (`rows x
/// state_len`, from [`Summary::snapshot`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window<'a> {
    pub(crate) obs: &'a [f32],
    pub(crate) steps: usize,
    pub(crate) rows: usize,
    pub(crate) resets: &'a [bool],
    pub(crate) initial: &'a [f32],
}

impl Summary {
    /// The summarizer `history` describes, over observations of `obs_len` elements; an
    /// LSTM's weights are drawn from `seed` (PyTorch's initialisation).
    pub(crate) fn new(history: History, obs_len: usize, seed: u64) -> Result<Self> {
        SummaryShape::new(history, obs_len)?;
        Ok(match history {
            History::None => Summary::None(Identity::new(obs_len)?),
            History::Stack { k } => Summary::Stack(Stack::new(obs_len, k)?),
            History::Lstm { hidden } => {
                let mut rng =
                    Xoshiro256PlusPlus::seed_from_u64(seed.wrapping_add(LSTM_SEED_OFFSET));
                Summary::Lstm(rl_history::Lstm::new(obs_len, hidden, &mut rng)?)
            }
        })
    }

    /// What it is by size alone.
    pub(crate) fn shape(&self) -> SummaryShape {
        SummaryShape {
            history: self.history(),
            obs_len: self.obs_len(),
            output_len: self.output_len(),
            state_len: self.state_len(),
            cell_params: self.cell().map_or(0, rl_nn::Weights::num_params),
            state_bytes: match self {
                Summary::None(s) => s.state_bytes(1),
                Summary::Stack(s) => s.state_bytes(1),
                Summary::Lstm(s) => s.state_bytes(1),
            },
        }
    }

    pub(crate) fn history(&self) -> History {
        match self {
            Summary::None(_) => History::None,
            Summary::Stack(stack) => History::Stack { k: stack.k() },
            Summary::Lstm(lstm) => History::Lstm {
                hidden: lstm.output_len(),
            },
        }
    }

    fn obs_len(&self) -> usize {
        match self {
            Summary::None(s) => s.input_len(),
            Summary::Stack(s) => s.input_len(),
            Summary::Lstm(s) => s.input_len(),
        }
    }

    /// Elements of one environment's features (the heads' input).
    pub(crate) fn output_len(&self) -> usize {
        match self {
            Summary::None(s) => s.output_len(),
            Summary::Stack(s) => s.output_len(),
            Summary::Lstm(s) => s.output_len(),
        }
    }

    /// Floats of one environment's snapshot: `h` and `c` for an LSTM, the `k - 1` newest
    /// rows of the last stack for a stack, nothing for the identity.
    pub(crate) fn state_len(&self) -> usize {
        match self {
            Summary::None(_) => 0,
            Summary::Stack(s) => (s.k() - 1) * s.input_len(),
            Summary::Lstm(s) => 2 * s.output_len(),
        }
    }

    /// The LSTM cell, if the summarizer is one.
    pub(crate) fn cell(&self) -> Option<&rl_nn::Lstm> {
        match self {
            Summary::Lstm(lstm) => Some(lstm.cell()),
            _ => None,
        }
    }

    pub(crate) fn cell_mut(&mut self) -> Option<&mut rl_nn::Lstm> {
        match self {
            Summary::Lstm(lstm) => Some(lstm.cell_mut()),
            _ => None,
        }
    }

    /// A fresh acting state for `envs` environments.
    pub(crate) fn state(&self, envs: usize) -> SummaryState {
        match self {
            Summary::None(s) => SummaryState::None(s.state(envs)),
            Summary::Stack(s) => SummaryState::Stack(s.state(envs)),
            Summary::Lstm(s) => SummaryState::Lstm(s.state(envs)),
        }
    }

    /// One acting step for every environment of `state` (`rl_history::Summarizer::step`).
    pub(crate) fn step(
        &self,
        state: &mut SummaryState,
        obs: &[f32],
        starts: &[bool],
        out: &mut [f32],
    ) -> Result<()> {
        match (self, state) {
            (Summary::None(s), SummaryState::None(state)) => s.step(state, obs, starts, out)?,
            (Summary::Stack(s), SummaryState::Stack(state)) => s.step(state, obs, starts, out)?,
            (Summary::Lstm(s), SummaryState::Lstm(state)) => s.step(state, obs, starts, out)?,
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    /// One step of every row from an explicit state: `state` (`rows x state_len`, as
    /// [`Summary::snapshot`] writes it) is where each row is, `starts` where a row's
    /// episode starts (its state is cleared first); the step's output goes to
    /// `features` and each row's state after it back to `state`. An LSTM loads `h, c`
    /// into `acting` and steps (the arithmetic of acting, bit for bit); a stack or no
    /// history replays one step through `peek` (copies only).
    pub(crate) fn step_from(
        &self,
        acting: &mut SummaryState,
        peek: &mut ReplayWorkspace,
        window: (&[f32], &[bool]),
        state: &mut [f32],
        features: &mut [f32],
    ) -> Result<()> {
        let (obs, starts) = window;
        let rows = starts.len();
        check_len("state", rows * self.state_len(), state.len())?;
        match (self, &mut *acting) {
            (Summary::Lstm(s), SummaryState::Lstm(lstm)) => {
                let hidden = s.output_len();
                let (h, c) = lstm.h_c_mut();
                check_len("acting state", rows * hidden, h.len())?;
                let per_row = state
                    .chunks_exact(2 * hidden)
                    .zip(h.chunks_exact_mut(hidden).zip(c.chunks_exact_mut(hidden)));
                for (saved, (h, c)) in per_row {
                    h.copy_from_slice(&saved[..hidden]);
                    c.copy_from_slice(&saved[hidden..]);
                }
                self.step(acting, obs, starts, features)?;
            }
            (Summary::Lstm(_), _) => return Err(mismatch()),
            _ => {
                let window = Window {
                    obs,
                    steps: 1,
                    rows,
                    resets: starts,
                    initial: state,
                };
                let out = self.replay(window, peek)?;
                check_len("features", out.len(), features.len())?;
                features.copy_from_slice(out);
            }
        }
        self.snapshot(acting, features, state)
    }

    /// Writes every environment's state before its next step into `out` (`envs x
    /// state_len`): an LSTM's `h` then `c`, or the newest `k - 1` rows of the stack it
    /// output last (`last`, `envs x output_len`).
    pub(crate) fn snapshot(
        &self,
        state: &SummaryState,
        last: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        match (self, state) {
            (Summary::None(_), SummaryState::None(_)) => {}
            (Summary::Stack(s), SummaryState::Stack(_)) => {
                let (width, skip) = (s.output_len(), s.input_len());
                let rows = last
                    .chunks_exact(width)
                    .zip(out.chunks_exact_mut(width - skip));
                for (stack, snapshot) in rows {
                    snapshot.copy_from_slice(&stack[skip..]);
                }
            }
            (Summary::Lstm(s), SummaryState::Lstm(state)) => {
                let hidden = s.output_len();
                let rows = state
                    .h()
                    .chunks_exact(hidden)
                    .zip(state.c().chunks_exact(hidden))
                    .zip(out.chunks_exact_mut(2 * hidden));
                for ((h, c), snapshot) in rows {
                    snapshot[..hidden].copy_from_slice(h);
                    snapshot[hidden..].copy_from_slice(c);
                }
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }

    /// Scratch for windows of up to `max_steps x max_rows`.
    pub(crate) fn replay_workspace(&self, max_steps: usize, max_rows: usize) -> ReplayWorkspace {
        let n = max_steps * max_rows;
        let (features, lstm) = match self {
            Summary::Lstm(s) => {
                let hidden = s.output_len();
                let ws = s.cell().sequence_workspace(max_steps, max_rows);
                let initial = vec![0.0; max_rows * hidden];
                (Vec::new(), Some((ws, initial.clone(), initial)))
            }
            _ => (vec![0.0; n * self.output_len()], None),
        };
        ReplayWorkspace {
            max_steps,
            max_rows,
            features,
            lstm,
        }
    }

    /// The features of a window replayed from each row's snapshot: `steps x rows x
    /// output_len`, time-major, equal to what acting output step by step from the same
    /// states (identity and stacks exactly, the LSTM within float rounding of its
    /// batched products). A reset zeroes an LSTM row's state before the step and restarts
    /// a stack's padding there. Allocates nothing.
    pub(crate) fn replay<'w>(
        &self,
        window: Window<'_>,
        ws: &'w mut ReplayWorkspace,
    ) -> Result<&'w [f32]> {
        let Window {
            obs,
            steps,
            rows,
            resets,
            initial,
        } = window;
        if steps > ws.max_steps || rows > ws.max_rows {
            return Err(Error::config(
                "replay window",
                format!(
                    "is {steps} steps x {rows} rows but the workspace holds {} x {}: make it for the largest window",
                    ws.max_steps, ws.max_rows
                ),
            ));
        }
        let n = steps * rows;
        check_len("replayed observations", n * self.obs_len(), obs.len())?;
        check_len("replayed resets", n, resets.len())?;
        check_len(
            "replayed initial states",
            rows * self.state_len(),
            initial.len(),
        )?;
        match self {
            Summary::None(_) => {
                let features = &mut ws.features[..obs.len()];
                features.copy_from_slice(obs);
                Ok(features)
            }
            Summary::Stack(s) => {
                let features = &mut ws.features[..n * s.output_len()];
                replay_stack(s, window, features);
                Ok(features)
            }
            Summary::Lstm(s) => {
                let hidden = s.output_len();
                let Some((lstm_ws, h0, c0)) = &mut ws.lstm else {
                    return Err(mismatch());
                };
                let (h0, c0) = (&mut h0[..rows * hidden], &mut c0[..rows * hidden]);
                let per_row = initial
                    .chunks_exact(2 * hidden)
                    .zip(h0.chunks_exact_mut(hidden).zip(c0.chunks_exact_mut(hidden)));
                for (snapshot, (h, c)) in per_row {
                    h.copy_from_slice(&snapshot[..hidden]);
                    c.copy_from_slice(&snapshot[hidden..]);
                }
                let sequence = Sequence {
                    input: obs,
                    steps,
                    rows,
                    resets: Some(resets),
                    h0,
                    c0,
                };
                Ok(s.cell().forward_sequence(sequence, lstm_ws)?)
            }
        }
    }

    /// The backward pass of the last [`Summary::replay`] through `ws`, given the loss's
    /// gradient with respect to its features: adds the LSTM's parameter gradients into
    /// `grads` (truncated at the window's start and at resets). Nothing for summarizers
    /// without weights.
    pub(crate) fn replay_backward(
        &self,
        ws: &mut ReplayWorkspace,
        d_features: &[f32],
        grads: Option<&mut [f32]>,
    ) -> Result<()> {
        if let (Summary::Lstm(s), Some((lstm_ws, ..))) = (self, &mut ws.lstm) {
            let grads = SequenceGrads {
                params: grads,
                ..SequenceGrads::default()
            };
            s.cell().backward_sequence(lstm_ws, d_features, grads)?;
        }
        Ok(())
    }
}

/// Stacks of a window: each row's stack is the previous one (its snapshot at the first
/// step) shifted by one observation, or padding where its episode starts.
fn replay_stack(stack: &Stack, window: Window<'_>, features: &mut [f32]) {
    let (len, width) = (stack.input_len(), stack.output_len());
    let keep = width - len;
    let rows = window.rows;
    for t in 0..window.steps {
        for b in 0..rows {
            let at = t * rows + b;
            let obs = &window.obs[at * len..(at + 1) * len];
            let (before, rest) = features.split_at_mut(at * width);
            let out = &mut rest[..width];
            if window.resets[at] {
                for (j, frame) in out.chunks_exact_mut(len).enumerate() {
                    match stack.padding() {
                        Padding::Zeros if j + 1 < stack.k() => frame.fill(0.0),
                        _ => frame.copy_from_slice(obs),
                    }
                }
                continue;
            }
            let previous = if t == 0 {
                &window.initial[b * keep..(b + 1) * keep]
            } else {
                let prev = (t - 1) * rows + b;
                &before[prev * width + len..(prev + 1) * width]
            };
            out[..keep].copy_from_slice(previous);
            out[keep..].copy_from_slice(obs);
        }
    }
}

fn mismatch() -> Error {
    Error::config(
        "summarizer state",
        "belongs to another kind of summarizer: make it with the policy that uses it",
    )
}
