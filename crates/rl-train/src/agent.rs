//! A trained agent loaded from a run directory, acting on observations: [`Agent`].
//!
//! [`Agent::load`] restores the policy of a run's `checkpoint/` or `best/` exactly as
//! `rl eval` does (the run's `config.toml` builds the learner through the
//! [`Registry`], its checkpoint is restored into it), then acts on batches of
//! observations: [`Agent::act`] for feed-forward policies (PPO, SAC, discrete SAC, DQN),
//! [`Agent::act_recurrent`] with an explicit [`RecurrentState`] for recurrent PPO. Acting
//! is deterministic by default (the actions `rl eval` takes); [`Agent::set_mode`] samples
//! instead. After the first call with a given number of rows nothing is allocated.
//!
//! ```no_run
//! use rl_train::agent::{Agent, Which};
//!
//! let mut agent = Agent::load("runs/ppo_cartpole".as_ref(), Which::Latest)?;
//! let obs = [0.01f32, -0.02, 0.03, 0.0]; // one CartPole observation
//! let mut action = [0u32];
//! agent.act(&obs, &mut action)?;
//! # Ok::<(), rl_train::run::Error>(())
//! ```

#[cfg(test)]
mod tests;

use std::path::Path;

use rl_algos::dqn::Dqn;
use rl_algos::policy::{
    CategoricalPolicy, GaussianPolicy, History, Mode, RecurrentCategoricalPolicy,
};
use rl_algos::predict::Predict;
use rl_algos::sac::{DiscreteSac, Sac};
use rl_algos::td3::Td3;
use rl_collect::ActOutput;

use crate::config::Algo;
pub use crate::run::Which;
use crate::run::{ActionSpace, Error, Registry, Result};

/// A policy restored from a run directory, ready to act. See the [module](self).
pub struct Agent {
    acting: Box<dyn Acting>,
    algo: Algo,
    env: String,
    obs_len: usize,
    actions: ActionSpace,
    env_steps: u64,
    mode: Mode,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("algo", &self.algo)
            .field("env", &self.env)
            .field("obs_len", &self.obs_len)
            .field("actions", &self.actions)
            .field("env_steps", &self.env_steps)
            .field("mode", &self.mode)
            .field("state_len", &self.acting.state_len())
            .finish()
    }
}

/// What a loaded run's job gives: the acting part and the environment's sizes.
pub(crate) struct Loaded {
    pub(crate) acting: Box<dyn Acting>,
    pub(crate) obs_len: usize,
    pub(crate) actions: ActionSpace,
}

impl Agent {
    /// The agent saved in the run directory `dir` (`which`: its latest checkpoint or its
    /// best evaluation's), on the built-in environments. Acts deterministically.
    ///
    /// # Errors
    /// [`Error::Usage`] for a folder that holds no run (no `config.toml`) or no such
    /// checkpoint, or a checkpoint of another algorithm; [`Error::Config`] for a run of
    /// an environment that is not registered (use [`Agent::load_with`]); [`Error::Nn`] or
    /// [`Error::Algos`] for a damaged or mismatched checkpoint.
    pub fn load(dir: &Path, which: Which) -> Result<Self> {
        Self::load_with(&Registry::builtin(), dir, which)
    }

    /// As [`Agent::load`], for a run on an environment of `registry`.
    ///
    /// # Errors
    /// As [`Agent::load`].
    pub fn load_with(registry: &Registry, dir: &Path, which: Which) -> Result<Self> {
        let (config, counters, loaded) = crate::run::load(registry, dir, which)?;
        let mut agent = Self {
            acting: loaded.acting,
            algo: config.algo,
            env: config.env,
            obs_len: loaded.obs_len,
            actions: loaded.actions,
            env_steps: counters.env_steps,
            mode: Mode::Deterministic,
        };
        agent.set_mode(Mode::Deterministic);
        Ok(agent)
    }

    /// The algorithm that trained it.
    pub fn algo(&self) -> Algo {
        self.algo
    }

    /// The name of its environment in the registry.
    pub fn env(&self) -> &str {
        &self.env
    }

    /// Floats of one observation.
    pub fn obs_len(&self) -> usize {
        self.obs_len
    }

    /// Its actions: `n` discrete ones (one `u32` per row) or a box of `dim` floats.
    pub fn action_space(&self) -> ActionSpace {
        self.actions
    }

    /// Elements of one row of actions: 1 for discrete actions, the box's dimension.
    pub fn action_len(&self) -> usize {
        match self.actions {
            ActionSpace::Discrete(_) => 1,
            ActionSpace::Box(dim) => dim,
        }
    }

    /// Env steps the run had taken when the checkpoint was saved.
    pub fn env_steps(&self) -> u64 {
        self.env_steps
    }

    /// Whether it acts through [`Agent::act_recurrent`] (recurrent PPO).
    pub fn is_recurrent(&self) -> bool {
        self.acting.state_len().is_some()
    }

    /// Floats of one row of a [`RecurrentState`] (0 for a feed-forward policy, or a
    /// recurrent one without history): `2 x hidden` for an LSTM (`h` then `c`),
    /// `(k - 1) x obs_len` for a stack of `k`.
    pub fn state_len(&self) -> usize {
        self.acting.state_len().unwrap_or(0)
    }

    /// What a recurrent policy remembers (`None` for a feed-forward one): how a row of a
    /// [`RecurrentState`] splits (an LSTM's `h` then `c`, or a stack's rows).
    pub fn history(&self) -> Option<History> {
        self.acting.history()
    }

    /// How it chooses actions: [`Mode::Deterministic`] (the default, what `rl eval`
    /// does) or [`Mode::Sample`].
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Switches between the most likely action and sampling.
    pub fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
        self.acting.set_mode(mode);
    }

    /// The state of `rows` episodes that start with their next observation.
    pub fn initial_state(&self, rows: usize) -> RecurrentState {
        RecurrentState::new(rows, self.state_len())
    }

    /// Writes the actions for the observations `obs` (rows of [`Agent::obs_len`] floats)
    /// into `actions` ([`Agent::action_len`] elements per row: `u32` indices for
    /// discrete actions, `f32` for a box), in the current mode. Allocates nothing after
    /// the first call with a given number of rows.
    ///
    /// # Errors
    /// [`Error::Input`] for observations that are not whole rows, no rows, an action
    /// buffer of another length or element type than the actions, or a recurrent policy
    /// (use [`Agent::act_recurrent`]); [`Error::Algos`] for what the policy refuses.
    pub fn act<A: AgentAction>(&mut self, obs: &[f32], actions: &mut [A]) -> Result<()> {
        if self.is_recurrent() {
            return Err(input(
                "agent",
                format!(
                    "{} is recurrent: act with act_recurrent and a state from initial_state",
                    self.algo
                ),
            ));
        }
        let rows = self.rows(obs, actions.len())?;
        A::act(self.acting.as_mut(), obs, rows, actions)
            .ok_or_else(|| {
                input(
                    "actions",
                    format!(
                        "are {} but the agent takes {}: give a buffer of {}",
                        A::NAME,
                        self.actions,
                        match self.actions {
                            ActionSpace::Discrete(_) => "u32",
                            ActionSpace::Box(_) => "f32",
                        }
                    ),
                )
            })?
            .map_err(Error::Algos)
    }

    /// [`Agent::act`] for an agent that reads frames of bytes (a convolutional encoder
    /// on `u8` observations, e.g. Catch or Atari stacks): `obs` is rows of frames,
    /// `actions` one index per row.
    ///
    /// # Errors
    /// As [`Agent::act`]; an agent that reads `f32` observations (use [`Agent::act`]).
    pub fn act_frames(&mut self, obs: &[u8], actions: &mut [u32]) -> Result<()> {
        let rows = self.rows(obs, actions.len())?;
        self.acting
            .act_frames(obs, rows, actions)
            .ok_or_else(|| {
                input(
                    "actions",
                    format!("are u32 but the agent takes {}", self.actions),
                )
            })?
            .map_err(Error::Algos)
    }

    /// Acts on `state.rows()` observations from `state`, for a recurrent policy: rows
    /// whose episode starts with this observation are marked with
    /// [`RecurrentState::set_episode_start`] (a new state marks every row); each row's
    /// state after the step is written back and its mark cleared, so the next call
    /// continues the episodes. The actions equal those the policy takes when it keeps
    /// the state itself (as `rl eval` runs it), bit for bit. Allocates nothing after the
    /// first call with a given number of rows.
    ///
    /// # Errors
    /// [`Error::Input`] for a feed-forward policy (use [`Agent::act`]), observations or
    /// actions of another number of rows than the state, a state of another agent;
    /// [`Error::Algos`] for what the policy refuses.
    pub fn act_recurrent(
        &mut self,
        obs: &[f32],
        state: &mut RecurrentState,
        actions: &mut [u32],
    ) -> Result<()> {
        let Some(state_len) = self.acting.state_len() else {
            return Err(input(
                "agent",
                format!("{} is feed-forward: act with act, no state", self.algo),
            ));
        };
        if state.state_len != state_len {
            return Err(input(
                "state",
                format!(
                    "has {} floats per row but this agent keeps {state_len}: make it with this agent's initial_state",
                    state.state_len
                ),
            ));
        }
        let rows = self.rows(obs, actions.len())?;
        if rows != state.rows() {
            return Err(input(
                "state",
                format!(
                    "holds {} rows but the observations are {rows}: make it with initial_state({rows})",
                    state.rows()
                ),
            ));
        }
        self.acting
            .act_recurrent(obs, &mut state.values, &state.starts, actions)
            .map_err(Error::Algos)?;
        state.starts.fill(false);
        Ok(())
    }

    /// The number of rows of `obs`, checked against an action buffer of `action_elems`.
    fn rows<O>(&self, obs: &[O], action_elems: usize) -> Result<usize> {
        let n = self.obs_len;
        if obs.is_empty() || !obs.len().is_multiple_of(n) {
            return Err(input(
                "observations",
                format!(
                    "have {} elements, not a whole number of rows of {n} (env {}): give rows x {n} elements, at least one row",
                    obs.len(),
                    self.env
                ),
            ));
        }
        let rows = obs.len() / n;
        let expected = rows * self.action_len();
        if action_elems != expected {
            return Err(input(
                "actions",
                format!(
                    "have {action_elems} elements but {rows} rows of {} take {expected}: give {} per row",
                    self.actions,
                    self.action_len()
                ),
            ));
        }
        Ok(rows)
    }
}

fn input(what: &'static str, message: String) -> Error {
    Error::Input { what, message }
}

/// The per-episode memory of a recurrent [`Agent`] for a batch of rows
/// ([`Agent::initial_state`]): each row's state (`rows x state_len` floats, an LSTM's `h`
/// then `c`) and whether its episode starts with the next observation.
#[derive(Clone, Debug, PartialEq)]
pub struct RecurrentState {
    state_len: usize,
    values: Vec<f32>,
    starts: Vec<bool>,
}

impl RecurrentState {
    /// `rows` episodes about to start, each with a state of `state_len` floats.
    pub fn new(rows: usize, state_len: usize) -> Self {
        Self {
            state_len,
            values: vec![0.0; rows * state_len],
            starts: vec![true; rows],
        }
    }

    /// Rows (episodes acted on side by side).
    pub fn rows(&self) -> usize {
        self.starts.len()
    }

    /// Floats of one row's state.
    pub fn state_len(&self) -> usize {
        self.state_len
    }

    /// Every row's state, `rows x state_len`.
    pub fn as_slice(&self) -> &[f32] {
        &self.values
    }

    /// Every row's state, to set it (a state saved by [`RecurrentState::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.values
    }

    /// Whether row `row`'s episode starts with its next observation.
    pub fn episode_start(&self, row: usize) -> bool {
        self.starts.get(row).copied().unwrap_or(false)
    }

    /// Marks row `row`'s episode as starting with its next observation (after a reset);
    /// a row out of range is ignored.
    pub fn set_episode_start(&mut self, row: usize) {
        if let Some(start) = self.starts.get_mut(row) {
            *start = true;
        }
    }

    /// Marks every row as starting an episode.
    pub fn reset_all(&mut self) {
        self.starts.fill(true);
    }

    /// Whether each row's episode starts with its next observation, to set them all.
    pub fn episode_starts_mut(&mut self) -> &mut [bool] {
        &mut self.starts
    }
}

/// The element type of an agent's actions: `u32` (discrete indices) or `f32` (a box).
/// Sealed.
pub trait AgentAction: rl_core::Element + sealed::Sealed {
    /// The type's name in errors.
    #[doc(hidden)]
    const NAME: &'static str;

    /// Acts through `acting` if it takes this element type (`None` otherwise).
    #[doc(hidden)]
    #[expect(
        private_interfaces,
        reason = "sealed: only u32 and f32 implement it, inside this crate"
    )]
    fn act(
        acting: &mut dyn Acting,
        obs: &[f32],
        rows: usize,
        actions: &mut [Self],
    ) -> Option<rl_algos::Result<()>>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for f32 {}
}

impl AgentAction for u32 {
    const NAME: &'static str = "u32";

    #[expect(private_interfaces, reason = "sealed")]
    fn act(
        acting: &mut dyn Acting,
        obs: &[f32],
        rows: usize,
        actions: &mut [u32],
    ) -> Option<rl_algos::Result<()>> {
        acting.act_discrete(obs, rows, actions)
    }
}

impl AgentAction for f32 {
    const NAME: &'static str = "f32";

    #[expect(private_interfaces, reason = "sealed")]
    fn act(
        acting: &mut dyn Acting,
        obs: &[f32],
        rows: usize,
        actions: &mut [f32],
    ) -> Option<rl_algos::Result<()>> {
        acting.act_continuous(obs, rows, actions)
    }
}

/// The acting half of a loaded learner: a restored policy (or off-policy learner) and
/// its scratch.
pub(crate) trait Acting: Send {
    fn set_mode(&mut self, mode: Mode);

    /// Floats per row of a recurrent state; `None` for a feed-forward policy.
    fn state_len(&self) -> Option<usize>;

    /// What a recurrent policy remembers; `None` for a feed-forward policy.
    fn history(&self) -> Option<History> {
        None
    }

    /// `None`: the actions are not discrete.
    fn act_discrete(
        &mut self,
        obs: &[f32],
        rows: usize,
        actions: &mut [u32],
    ) -> Option<rl_algos::Result<()>>;

    /// `None`: the actions are not a box.
    fn act_continuous(
        &mut self,
        obs: &[f32],
        rows: usize,
        actions: &mut [f32],
    ) -> Option<rl_algos::Result<()>>;

    /// `None`: the actions are not discrete. Frames of bytes, for a policy that reads
    /// them.
    fn act_frames(
        &mut self,
        _obs: &[u8],
        _rows: usize,
        _actions: &mut [u32],
    ) -> Option<rl_algos::Result<()>> {
        Some(Err(reads_floats()))
    }

    /// Only called when [`Acting::state_len`] is `Some`.
    fn act_recurrent(
        &mut self,
        obs: &[f32],
        state: &mut [f32],
        starts: &[bool],
        actions: &mut [u32],
    ) -> rl_algos::Result<()>;
}

/// The error of frames given to an agent that reads `f32` observations.
fn reads_floats() -> rl_algos::Error {
    rl_algos::Error::config(
        "agent observations",
        "are frames of bytes (u8) but this agent reads f32 observations: act with act",
    )
}

/// The error of `f32` observations given to an agent that reads frames of bytes.
fn reads_frames() -> rl_algos::Error {
    rl_algos::Error::config(
        "agent observations",
        "are f32 but this agent reads frames of bytes (u8): act with act_frames",
    )
}

/// Observation element types an agent reads: rows of `f32` ([`Agent::act`]) or of
/// bytes ([`Agent::act_frames`]).
trait ObsCast: rl_nn::Observation {
    fn floats(obs: &[f32]) -> Option<&[Self]>;
    fn bytes(obs: &[u8]) -> Option<&[Self]>;
}

impl ObsCast for f32 {
    fn floats(obs: &[f32]) -> Option<&[f32]> {
        Some(obs)
    }
    fn bytes(_: &[u8]) -> Option<&[f32]> {
        None
    }
}

impl ObsCast for u8 {
    fn floats(_: &[f32]) -> Option<&[u8]> {
        None
    }
    fn bytes(obs: &[u8]) -> Option<&[u8]> {
        Some(obs)
    }
}

/// A learner's (or its policy's) way to an [`Acting`], once restored.
pub(crate) trait Loadable {
    fn into_acting(self) -> Box<dyn Acting>;
}

/// A feed-forward policy `P` and its output scratch, kept between calls.
struct FeedForward<P: Predict> {
    policy: P,
    log_probs: Vec<f32>,
    values: Vec<f32>,
    states: Vec<P::State>,
}

impl<P> FeedForward<P>
where
    P: Predict<Obs: ObsCast, Act: Cast> + 'static,
{
    fn boxed(policy: P) -> Box<dyn Acting> {
        Box::new(Self {
            policy,
            log_probs: Vec::new(),
            values: Vec::new(),
            states: Vec::new(),
        })
    }

    fn act_rows(
        &mut self,
        obs: &[P::Obs],
        rows: usize,
        actions: &mut [P::Act],
    ) -> rl_algos::Result<()> {
        self.log_probs.resize(rows, 0.0);
        self.values.resize(rows, 0.0);
        // A fresh slot per row, every call.
        self.states.clear();
        self.states.resize(rows, P::State::default());
        let out = ActOutput {
            actions,
            log_probs: &mut self.log_probs,
            values: &mut self.values,
        };
        self.policy
            .act(obs, &mut self.states, out)
            .map_err(|source| rl_algos::Error::Policy { source })
    }
}

/// Casts of an action buffer to a policy's element type.
trait Cast: Sized {
    fn from_u32(actions: &mut [u32]) -> Option<&mut [Self]>;
    fn from_f32(actions: &mut [f32]) -> Option<&mut [Self]>;
}

impl Cast for u32 {
    fn from_u32(actions: &mut [u32]) -> Option<&mut [u32]> {
        Some(actions)
    }
    fn from_f32(_: &mut [f32]) -> Option<&mut [u32]> {
        None
    }
}

impl Cast for f32 {
    fn from_u32(_: &mut [u32]) -> Option<&mut [f32]> {
        None
    }
    fn from_f32(actions: &mut [f32]) -> Option<&mut [f32]> {
        Some(actions)
    }
}

impl<P> Acting for FeedForward<P>
where
    P: Predict<Obs: ObsCast, Act: Cast> + 'static,
{
    fn set_mode(&mut self, mode: Mode) {
        self.policy.set_mode(mode);
    }

    fn state_len(&self) -> Option<usize> {
        None
    }

    fn act_discrete(
        &mut self,
        obs: &[f32],
        rows: usize,
        actions: &mut [u32],
    ) -> Option<rl_algos::Result<()>> {
        let actions = P::Act::from_u32(actions)?;
        let Some(obs) = P::Obs::floats(obs) else {
            return Some(Err(reads_frames()));
        };
        Some(self.act_rows(obs, rows, actions))
    }

    fn act_frames(
        &mut self,
        obs: &[u8],
        rows: usize,
        actions: &mut [u32],
    ) -> Option<rl_algos::Result<()>> {
        let actions = P::Act::from_u32(actions)?;
        let Some(obs) = P::Obs::bytes(obs) else {
            return Some(Err(reads_floats()));
        };
        Some(self.act_rows(obs, rows, actions))
    }

    fn act_continuous(
        &mut self,
        obs: &[f32],
        rows: usize,
        actions: &mut [f32],
    ) -> Option<rl_algos::Result<()>> {
        let actions = P::Act::from_f32(actions)?;
        let Some(obs) = P::Obs::floats(obs) else {
            return Some(Err(reads_frames()));
        };
        Some(self.act_rows(obs, rows, actions))
    }

    fn act_recurrent(
        &mut self,
        _: &[f32],
        _: &mut [f32],
        _: &[bool],
        _: &mut [u32],
    ) -> rl_algos::Result<()> {
        Err(rl_algos::Error::config(
            "agent",
            "is feed-forward: act without a state",
        ))
    }
}

/// A recurrent policy acting from explicit states, and its output scratch.
struct Recurrent {
    policy: RecurrentCategoricalPolicy,
    log_probs: Vec<f32>,
    values: Vec<f32>,
}

impl Acting for Recurrent {
    fn set_mode(&mut self, mode: Mode) {
        self.policy.set_mode(mode);
    }

    fn state_len(&self) -> Option<usize> {
        Some(self.policy.state_len())
    }

    fn history(&self) -> Option<History> {
        Some(self.policy.history())
    }

    fn act_discrete(&mut self, _: &[f32], _: usize, _: &mut [u32]) -> Option<rl_algos::Result<()>> {
        None
    }

    fn act_continuous(
        &mut self,
        _: &[f32],
        _: usize,
        _: &mut [f32],
    ) -> Option<rl_algos::Result<()>> {
        None
    }

    fn act_recurrent(
        &mut self,
        obs: &[f32],
        state: &mut [f32],
        starts: &[bool],
        actions: &mut [u32],
    ) -> rl_algos::Result<()> {
        let rows = starts.len();
        self.log_probs.resize(rows, 0.0);
        self.values.resize(rows, 0.0);
        let out = ActOutput {
            actions,
            log_probs: &mut self.log_probs,
            values: &mut self.values,
        };
        self.policy.act_with_state(obs, state, starts, out)
    }
}

/// Feed-forward policies and off-policy learners act through [`FeedForward`].
macro_rules! feed_forward {
    ($($policy:ty),*) => {$(
        impl Loadable for $policy {
            fn into_acting(self) -> Box<dyn Acting> {
                FeedForward::boxed(self)
            }
        }
    )*};
}

feed_forward!(
    CategoricalPolicy,
    CategoricalPolicy<u8>,
    GaussianPolicy,
    Sac,
    DiscreteSac,
    Dqn,
    Dqn<u8>,
    Td3
);

/// An off-policy learner behind a summarizer (`[sequence]`): its memory lives in the
/// learner, one state per environment, which the agent's calls cannot carry yet.
struct SequenceLearner;

impl Acting for SequenceLearner {
    fn set_mode(&mut self, _: Mode) {}

    fn state_len(&self) -> Option<usize> {
        None
    }

    fn act_discrete(&mut self, _: &[f32], _: usize, _: &mut [u32]) -> Option<rl_algos::Result<()>> {
        Some(Err(sequence_agent()))
    }

    fn act_continuous(
        &mut self,
        _: &[f32],
        _: usize,
        _: &mut [f32],
    ) -> Option<rl_algos::Result<()>> {
        Some(Err(sequence_agent()))
    }

    fn act_recurrent(
        &mut self,
        _: &[f32],
        _: &mut [f32],
        _: &[bool],
        _: &mut [u32],
    ) -> rl_algos::Result<()> {
        Err(sequence_agent())
    }
}

/// What an agent of a `[sequence]` learner says when asked to act.
fn sequence_agent() -> rl_algos::Error {
    rl_algos::Error::config(
        "sequence",
        "is set: a recurrent off-policy learner keeps its memory inside the learner, which an agent cannot load yet; evaluate it with `rl eval RUN` instead",
    )
}

impl<L: rl_algos::sequence::SequenceLearner> Loadable for rl_algos::sequence::Recurrent<L> {
    fn into_acting(self) -> Box<dyn Acting> {
        Box::new(SequenceLearner)
    }
}

impl Loadable for RecurrentCategoricalPolicy {
    fn into_acting(self) -> Box<dyn Acting> {
        Box::new(Recurrent {
            policy: self,
            log_probs: Vec::new(),
            values: Vec::new(),
        })
    }
}
