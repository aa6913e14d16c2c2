//! Config files of the `rl` command: one TOML table per experiment, every field of the
//! library's configurations settable, unknown keys and bad values refused with the key,
//! the value and what is allowed, before anything runs.
//!
//! ```toml
//! algo = "ppo"          # ppo | recurrent_ppo | sac | discrete_sac | dqn
//! env = "cartpole"      # a name of the environment registry (rl_train::run::Registry)
//!
//! [run]                 # rl::train::trainer::RunConfig (only total_steps is required)
//! total_steps = 100_000
//! n_envs = 8
//! goal = { training_return = { mean_return = 475.0, window = 20 } }
//!
//! [ppo]                 # rl::algos::ppo::PpoConfig: missing keys keep its defaults
//! n_steps = 32
//! adam = { lr = 2e-3 }  # nested tables merge too: betas and eps stay PPO's
//!
//! [policy]              # rl::algos::policy::PolicyConfig
//! hidden = [64, 64]
//! ```
//!
//! Which tables a config may hold depends on `algo`: `ppo` reads `[ppo]` and `[policy]`,
//! `recurrent_ppo` those and `[recurrent]`, `sac` and `discrete_sac` read `[sac]` and
//! `[off_policy]`, `dqn` reads `[dqn]` and `[off_policy]`, `td3` reads `[td3]` and
//! `[off_policy]`; `discrete_sac` and `dqn` also read `[sequence]` (a memory in front of
//! the learner: `rl::algos::sequence::RecurrentConfig`, trained on replayed windows);
//! every algorithm reads `[run]`
//! and `[log]`. A table of another algorithm is an error. Missing keys take the
//! defaults of the algorithm (`SacConfig::sb3()`, `DqnConfig::default()` ...), also
//! inside nested tables (`[sac.adam] lr = 1e-3` keeps SAC's Adam epsilon), and
//! [`Config::to_toml`] writes every value in force. The run's one seed is `run.seed`:
//! it seeds the networks, sampling and replay of every algorithm, so the algorithm
//! tables take no `seed` of their own.
//!
//! [`Config::from_toml`] reads a file's text with `--set key=value` overrides;
//! [`Config::from_table`] reads an already parsed table (a Python dict, say). Both check
//! types and keys, then [`Config::validate`] every value, so that a [`ConfigError`]
//! comes before any file or buffer exists.

use std::fmt;

use crate::trainer::{OffPolicyConfig, RunConfig};
use rl_algos::dqn::DqnConfig;
use rl_algos::policy::{History, PolicyConfig};
use rl_algos::ppo::{PpoConfig, RecurrentPpoConfig};
use rl_algos::sac::SacConfig;
use rl_algos::sequence::RecurrentConfig;
use rl_algos::td3::Td3Config;
use serde::{Deserialize, Serialize};
use toml::{Table, Value};

#[cfg(test)]
mod tests;

/// The learning algorithm of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algo {
    /// PPO (`rl::algos::ppo::Ppo`): a categorical policy for discrete actions, a
    /// Gaussian one for box actions.
    Ppo,
    /// Recurrent PPO (`rl::algos::ppo::RecurrentPpo`) with a history summarizer before
    /// the heads; discrete actions.
    RecurrentPpo,
    /// SAC (`rl::algos::sac::Sac`) for box actions.
    Sac,
    /// Discrete SAC (`rl::algos::sac::DiscreteSac`), scoring every action in chunks;
    /// over the environment's action feature table when it registered one.
    DiscreteSac,
    /// DQN (`rl::algos::dqn::Dqn`) for discrete actions.
    Dqn,
    /// TD3 (`rl::algos::td3::Td3`) for box actions.
    Td3,
}

impl Algo {
    /// Every algorithm, in the order errors list them.
    pub const ALL: [Algo; 6] = [
        Algo::Ppo,
        Algo::RecurrentPpo,
        Algo::Sac,
        Algo::DiscreteSac,
        Algo::Dqn,
        Algo::Td3,
    ];

    /// The name in config files: `"ppo"`, `"recurrent_ppo"`, `"sac"`, `"discrete_sac"`,
    /// `"dqn"`, `"td3"`.
    pub const fn name(self) -> &'static str {
        match self {
            Algo::Ppo => "ppo",
            Algo::RecurrentPpo => "recurrent_ppo",
            Algo::Sac => "sac",
            Algo::DiscreteSac => "discrete_sac",
            Algo::Dqn => "dqn",
            Algo::Td3 => "td3",
        }
    }

    /// The algorithm tables this algorithm reads (besides `run` and `log`).
    pub const fn tables(self) -> &'static [&'static str] {
        match self {
            Algo::Ppo => &["ppo", "policy"],
            Algo::RecurrentPpo => &["ppo", "policy", "recurrent"],
            Algo::Sac => &["sac", "off_policy"],
            Algo::DiscreteSac => &["sac", "off_policy", "sequence"],
            Algo::Dqn => &["dqn", "off_policy", "sequence"],
            Algo::Td3 => &["td3", "off_policy"],
        }
    }

    /// Whether it trains from a replay buffer.
    pub const fn off_policy(self) -> bool {
        matches!(self, Algo::Sac | Algo::DiscreteSac | Algo::Dqn | Algo::Td3)
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the replay buffer of an off-policy run stores actions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredActions {
    /// What the learners store: the action itself (a `u32` index for discrete actions,
    /// the floats of a box action). The default.
    #[default]
    Index,
    /// One float per possible action (the one-hot layout of Pearl and others), for
    /// `rl plan` to show what such a buffer would cost. No learner trains from it:
    /// `rl train` refuses it.
    OneHot,
}

/// The recurrent policy of `algo = "recurrent_ppo"`: what it remembers and the length
/// of the chunks it trains on.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Recurrent {
    /// What the policy remembers: `"none"`, `{ stack = { k = 4 } }` or
    /// `{ lstm = { hidden = 64 } }` (the default).
    pub history: History,
    /// Steps per training chunk (truncated back-propagation through time), a divisor of
    /// `ppo.n_steps`; `ppo.batch_size` is a multiple of it. Default 16.
    pub chunk_len: usize,
}

impl Default for Recurrent {
    fn default() -> Self {
        Self {
            history: History::Lstm { hidden: 64 },
            chunk_len: 16,
        }
    }
}

/// What a run writes besides checkpoints: the metrics file's cadence, whether the
/// metrics also go to TensorBoard event files (`tb/`), and the plain progress lines'
/// cadence (the terminal progress bar redraws on its own).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A line of `metrics.jsonl` at most every this many env steps (and one at every
    /// evaluation and at the end). At least 1. Default 1000.
    pub metrics_every_steps: u64,
    /// A progress line on stderr at most every this many seconds when stderr is not a
    /// terminal. Positive. Default 5.
    pub progress_every_s: f64,
    /// Every metrics line also goes to a TensorBoard event file in the run's `tb/`
    /// folder (`tensorboard --logdir runs/`). Default true.
    pub tensorboard: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            metrics_every_steps: 1000,
            progress_every_s: 5.0,
            tensorboard: true,
        }
    }
}

/// One experiment: algorithm, environment, the loop and the algorithm's settings.
/// The tables of other algorithms are `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The algorithm.
    pub algo: Algo,
    /// The environment's name in the registry.
    pub env: String,
    /// Keyword arguments of the environment's constructor: `gymnasium.make(id,
    /// **env_kwargs)` for a Gymnasium id run from Python (`env_kwargs =
    /// { ctrl_cost_weight = 0.1 }`). Booleans, integers, floats, strings and arrays of
    /// them (arrays arrive as tuples). The built-in environments take none.
    #[serde(default, skip_serializing_if = "EnvKwargs::is_empty")]
    pub env_kwargs: EnvKwargs,
    /// The Atari preprocessing of an `ALE/...` id run from Python
    /// (`rl_envs::AtariConfig`: `life_loss = "terminate"` ends training episodes at a
    /// lost life, as SB3's `AtariWrapper` and CleanRL's `EpisodicLifeEnv` do; no-ops,
    /// frame skip, screen, stack, reward clipping). Absent: its defaults. Other
    /// environments refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atari: Option<rl_envs::AtariConfig>,
    /// How an off-policy replay stores actions (default `"index"`).
    #[serde(default)]
    pub stored_actions: StoredActions,
    /// The loop: budget, seed, environments, goal, evaluation, checkpoint cadence,
    /// memory budget.
    pub run: RunConfig,
    /// Metrics and progress cadence.
    #[serde(default)]
    pub log: LogConfig,
    /// PPO's policy networks (`ppo`, `recurrent_ppo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyConfig>,
    /// The recurrent policy's history (`recurrent_ppo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrent: Option<Recurrent>,
    /// PPO's hyperparameters (`ppo`, `recurrent_ppo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppo: Option<PpoConfig>,
    /// SAC's (`sac`, `discrete_sac`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sac: Option<SacConfig>,
    /// DQN's (`dqn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dqn: Option<DqnConfig>,
    /// TD3's (`td3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub td3: Option<Td3Config>,
    /// The off-policy loop: replay capacity and location, warm-up, training cadence,
    /// prioritized replay, collector (`sac`, `discrete_sac`, `dqn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_policy: Option<OffPolicyConfig>,
    /// A memory in front of an off-policy learner (`discrete_sac`, `dqn`): what it
    /// remembers (`history`), the windows it trains on (`seq_len`, `burn_in`), its
    /// optimiser and target. Absent (the default): the feed-forward learner. Keys it
    /// leaves out take `RecurrentConfig::default()`'s values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<RecurrentConfig>,
}

/// A config's `env_kwargs`: keyword arguments for the environment's constructor, by
/// name, in name order.
pub type EnvKwargs = std::collections::BTreeMap<String, EnvKwarg>;

/// One keyword argument of [`Config::env_kwargs`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvKwarg {
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    String(String),
    /// An array of these (a Python tuple: `healthy_z_range = [0.7, 1e9]`).
    Array(Vec<EnvKwarg>),
}

/// A config that cannot be used: the key, and what is wrong with its value and what
/// is allowed, on one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The dotted key (`"ppo.n_steps"`), or `""` for the file as a whole.
    pub key: String,
    /// The whole message, which names the key.
    pub message: String,
}

impl ConfigError {
    /// An error about `key`: `problem` reads after `"{key}: "`.
    pub fn new(key: impl Into<String>, problem: impl fmt::Display) -> Self {
        let key = key.into();
        let message = if key.is_empty() {
            problem.to_string()
        } else {
            format!("{key}: {problem}")
        };
        Self { key, message }
    }

    /// A library validation error of the table `section`. `rl_algos::Error::Config`
    /// carries its key as a path of names ([`rl_algos::Key`]) and a problem reading
    /// `"is <value>: <fix>"`; the library's algorithm configs name their keys from the
    /// file's table already (`ppo.n_steps`, `run.n_envs`: `section` is `None`), while
    /// a type nested in a table names its fields from itself and is put under
    /// `section` here (`off_policy` + `train_freq`, `recurrent` + `history.stack.k`).
    pub(crate) fn from_algos(error: rl_algos::Error, section: Option<&'static str>) -> Self {
        match error {
            rl_algos::Error::Config { key, problem } => {
                let key = match section {
                    Some(section) => key.within(section),
                    None => key,
                };
                let message = format!("{key} {problem}");
                Self {
                    key: key.to_string(),
                    message,
                }
            }
            other => Self::new(section.unwrap_or_default(), other),
        }
    }
}

impl ConfigError {
    /// A library error about the `[sequence]` table: `rl_algos::sequence` names its
    /// settings `recurrent.*` (its type is `RecurrentConfig`), the file `sequence.*`.
    pub(crate) fn from_sequence(error: rl_algos::Error) -> Self {
        let error = Self::from_algos(error, None);
        match error.key.strip_prefix("recurrent") {
            Some(rest) => {
                let key = format!("sequence{rest}");
                let message = error.message.replacen(&error.key, &key, 1);
                Self { key, message }
            }
            None => error,
        }
    }
}

/// The table keys of the algorithm sections that a seed may not be set in.
const SEEDED: [&str; 4] = ["ppo", "sac", "dqn", "td3"];

impl Config {
    /// What a run of this config would do that its author probably did not mean, one
    /// line each (`rl train` prints them before it starts, `rl plan` after the plan):
    /// an off-policy warm-up (`off_policy.learning_starts`) that reaches the step budget,
    /// so the run never updates; a step budget below one on-policy rollout
    /// (`ppo.n_steps x run.n_envs`), which the run collects whole anyway.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let total = self.run.total_steps;
        if let Some(off) = &self.off_policy
            && off.learning_starts >= total
        {
            warnings.push(format!(
                "off_policy.learning_starts is {} and run.total_steps {total}: the run takes random actions only and never updates the learner; lower learning_starts or raise total_steps",
                off.learning_starts
            ));
        }
        if let Some(ppo) = &self.ppo {
            let rollout = (ppo.n_steps as u64).saturating_mul(self.run.n_envs as u64);
            if total < rollout {
                warnings.push(format!(
                    "run.total_steps is {total}, below one rollout (ppo.n_steps {} x run.n_envs {} = {rollout}): the run collects and trains on {rollout} env steps; lower ppo.n_steps or raise total_steps",
                    ppo.n_steps, self.run.n_envs
                ));
            }
        }
        warnings
    }

    /// A config of `algo` on `env` for `total_steps` env steps, every other value at
    /// its default.
    ///
    /// # Errors
    /// None in practice (the defaults are valid).
    pub fn new(algo: Algo, env: &str, total_steps: u64) -> Result<Self, ConfigError> {
        let mut table = Table::new();
        table.insert("algo".into(), Value::String(algo.name().into()));
        table.insert("env".into(), Value::String(env.into()));
        let mut run = Table::new();
        run.insert("total_steps".into(), Value::Integer(total_steps as i64));
        table.insert("run".into(), Value::Table(run));
        Self::from_table(table)
    }

    /// Reads a config file's text, then applies `overrides` (`"key=value"`, the value
    /// TOML or else a bare string, e.g. `"ppo.n_steps=64"`, `"env=pendulum"`,
    /// `"run.goal={eval_return={mean_return=475.0}}"`), then [`Config::from_table`].
    ///
    /// # Errors
    /// TOML that does not parse (with its line), an override without `=`, and the
    /// errors of [`Config::from_table`].
    pub fn from_toml(text: &str, overrides: &[String]) -> Result<Self, ConfigError> {
        let mut table: Table = text.parse().map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|span| text[..span.start.min(text.len())].lines().count().max(1));
            let message = e.message().trim().replace('\n', " ");
            match line {
                Some(line) => ConfigError::new("", format!("line {line}: {message}")),
                None => ConfigError::new("", message),
            }
        })?;
        for item in overrides {
            set(&mut table, item)?;
        }
        Self::from_table(table)
    }

    /// Reads a parsed table: the algorithm's defaults, the table merged over them, types
    /// and keys checked, then [`Config::validate`].
    ///
    /// # Errors
    /// A missing or unknown `algo`, a table of another algorithm, a `seed` in an
    /// algorithm table, an unknown key, a value of the wrong type, and the errors of
    /// [`Config::validate`].
    pub fn from_table(mut table: Table) -> Result<Self, ConfigError> {
        let algo = match table.get("algo") {
            None => {
                return Err(ConfigError::new(
                    "algo",
                    format!("is missing: use one of {}", algo_names()),
                ));
            }
            Some(value) => Algo::deserialize(value.clone()).map_err(|e| {
                let message = e.message().trim().replace('\n', " ");
                ConfigError::new("algo", message.replace("variant", "algorithm"))
            })?,
        };
        for name in [
            "policy",
            "recurrent",
            "ppo",
            "sac",
            "dqn",
            "td3",
            "off_policy",
            "sequence",
        ] {
            if table.contains_key(name) && !algo.tables().contains(&name) {
                return Err(ConfigError::new(
                    name,
                    format!(
                        "is a table algo = \"{algo}\" does not read (it reads {}): remove it or change algo",
                        algo.tables()
                            .iter()
                            .map(|t| format!("[{t}]"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        for name in SEEDED {
            if let Some(Value::Table(section)) = table.get(name)
                && section.contains_key("seed")
            {
                return Err(ConfigError::new(
                    format!("{name}.seed"),
                    "is set, but a run has one seed, run.seed (it seeds the networks, sampling and replay): remove it and use run.seed",
                ));
            }
        }
        let defaults = defaults(algo)?;
        merge(&mut table, defaults);
        if let Some(Value::Table(sequence)) = table.get_mut("sequence") {
            let defaults = Table::try_from(RecurrentConfig::default())
                .map_err(|e| ConfigError::new("sequence", format!("defaults: {e}")))?;
            merge(sequence, defaults);
        }
        checkpoint_defaults(&mut table);
        let config: Config =
            serde_path_to_error::deserialize(Value::Table(table)).map_err(|e| {
                let message = e.inner().message().trim().replace('\n', " ");
                ConfigError::new(key_of(e.path()), message)
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every value with the library's own validation (the key named as in the
    /// file), and the CLI's rules: `run.checkpoint.dir` and `run.checkpoint.best` are
    /// the run directory's to choose, `stored_actions = "one_hot"` only for off-policy
    /// algorithms, positive log cadences.
    ///
    /// # Errors
    /// The first invalid value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(name) = self.env_kwargs.keys().find(|k| !is_identifier(k)) {
            return Err(ConfigError::new(
                format!("env_kwargs.{name}"),
                "is not a keyword argument's name: use letters, digits and '_', not starting with a digit",
            ));
        }
        // The run directory names the checkpoint folder; the library's check needs one.
        let mut run = self.run.clone();
        if let Some(checkpoint) = &mut run.checkpoint
            && checkpoint.dir.as_os_str().is_empty()
        {
            checkpoint.dir = "RUN/checkpoint".into();
        }
        run.validate()
            .map_err(|e| ConfigError::from_algos(e, None))?;
        if let Some(checkpoint) = &self.run.checkpoint {
            if !checkpoint.dir.as_os_str().is_empty() {
                return Err(ConfigError::new(
                    "run.checkpoint.dir",
                    format!(
                        "is {:?}, but the run directory chooses it (--out DIR saves into DIR/checkpoint): remove it",
                        checkpoint.dir.display()
                    ),
                ));
            }
            if checkpoint.best.is_some() {
                return Err(ConfigError::new(
                    "run.checkpoint.best",
                    "is set, but the run directory chooses it (DIR/best, kept when run.eval is set): remove it",
                ));
            }
            if checkpoint.every_steps == Some(0) {
                return Err(ConfigError::new(
                    "run.checkpoint.every_steps",
                    "is 0: use at least 1, or leave it out to save only at the end",
                ));
            }
        }
        if self.log.metrics_every_steps == 0 {
            return Err(ConfigError::new(
                "log.metrics_every_steps",
                "is 0: use at least 1",
            ));
        }
        if !(self.log.progress_every_s.is_finite() && self.log.progress_every_s > 0.0) {
            return Err(ConfigError::new(
                "log.progress_every_s",
                format!(
                    "is {}: use a positive number of seconds",
                    self.log.progress_every_s
                ),
            ));
        }
        if self.stored_actions == StoredActions::OneHot && !self.algo.off_policy() {
            return Err(ConfigError::new(
                "stored_actions",
                format!(
                    "is \"one_hot\" but algo = \"{}\" has no replay buffer: leave it out",
                    self.algo
                ),
            ));
        }
        let n_envs = self.run.n_envs;
        let missing =
            |name: &str| ConfigError::new(name, format!("is missing for algo = \"{}\"", self.algo));
        match self.algo {
            Algo::Ppo | Algo::RecurrentPpo => {
                let policy = self.policy.as_ref().ok_or_else(|| missing("policy"))?;
                policy
                    .validate()
                    .map_err(|e| ConfigError::from_algos(e, None))?;
                let ppo = self.ppo.ok_or_else(|| missing("ppo"))?;
                match self.algo {
                    Algo::RecurrentPpo => {
                        let recurrent = self.recurrent.ok_or_else(|| missing("recurrent"))?;
                        recurrent
                            .history
                            .validate()
                            .map_err(|e| ConfigError::from_algos(e, Some("recurrent")))?;
                        RecurrentPpoConfig::new(ppo, recurrent.chunk_len)
                            .validate(n_envs)
                            .map_err(|e| ConfigError::from_algos(e, None))?;
                    }
                    _ => ppo
                        .validate(n_envs)
                        .map_err(|e| ConfigError::from_algos(e, None))?,
                }
            }
            Algo::Sac | Algo::DiscreteSac | Algo::Dqn | Algo::Td3 => {
                if let (Algo::Sac, Some(sac)) = (self.algo, &self.sac)
                    && sac.ensemble.is_some()
                {
                    return Err(ConfigError::new(
                        "sac.ensemble",
                        "is set, but algo = \"sac\" (continuous SAC) has no critic heads: remove it (discrete_sac and dqn take one)",
                    ));
                }
                match self.algo {
                    Algo::Dqn => self.dqn.as_ref().ok_or_else(|| missing("dqn"))?.validate(),
                    Algo::Td3 => self.td3.as_ref().ok_or_else(|| missing("td3"))?.validate(),
                    _ => self.sac.as_ref().ok_or_else(|| missing("sac"))?.validate(),
                }
                .map_err(|e| ConfigError::from_algos(e, None))?;
                let off = self
                    .off_policy
                    .as_ref()
                    .ok_or_else(|| missing("off_policy"))?;
                off.validate(n_envs)
                    .map_err(|e| ConfigError::from_algos(e, Some("off_policy")))?;
                if let Some(sequence) = &self.sequence {
                    self.validate_sequence(sequence)?;
                }
            }
        }
        Ok(())
    }

    /// Checks `[sequence]` against the learner it goes in front of: its own values
    /// (named under `sequence`, as the file has them), a batch of whole windows, and
    /// what a recurrent learner cannot take (DQN's convolutional encoder, which reads
    /// frames, not summaries).
    fn validate_sequence(&self, sequence: &RecurrentConfig) -> Result<(), ConfigError> {
        sequence.validate().map_err(ConfigError::from_sequence)?;
        let (batch, table) = match self.algo {
            Algo::Dqn => {
                let dqn = self.dqn.as_ref();
                if dqn.is_some_and(|d| d.encoder != rl_algos::policy::Encoder::Mlp) {
                    return Err(ConfigError::new(
                        "dqn.encoder",
                        "is a convolutional encoder, which reads frames, but [sequence] feeds the Q network summaries: use encoder = \"mlp\" or remove [sequence]",
                    ));
                }
                (dqn.map_or(0, |d| d.batch_size), "dqn")
            }
            _ => (self.sac.as_ref().map_or(0, |s| s.batch_size), "sac"),
        };
        if !batch.is_multiple_of(sequence.seq_len) {
            return Err(ConfigError::new(
                format!("{table}.batch_size"),
                format!(
                    "is {batch}: with sequence.seq_len {} it must be a multiple of it (each window gives seq_len rows with a loss)",
                    sequence.seq_len
                ),
            ));
        }
        Ok(())
    }

    /// The config as TOML: every value in force, defaults included (an optional
    /// setting that is off is left out); the one seed is `run.seed`.
    /// Reading it back gives this config.
    ///
    /// # Errors
    /// None in practice (every field is representable).
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        let mut table = Table::try_from(self)
            .map_err(|e| ConfigError::new("", format!("cannot be written as TOML: {e}")))?;
        shortest_floats(&mut table);
        toml::to_string(&table)
            .map_err(|e| ConfigError::new("", format!("cannot be written as TOML: {e}")))
    }
}

/// Writes every float that is an `f32` widened (`0.2f32` is `0.20000000298023224`) as
/// the shortest decimal that reads back as that `f32` (`0.2`), so the effective config
/// shows the values as they were given. An `f64` setting is rewritten only if its value
/// is exactly an `f32`'s, and then to the decimal of that `f32`.
fn shortest_floats(table: &mut Table) {
    fn visit(value: &mut Value) {
        match value {
            Value::Float(f) => {
                let narrow = *f as f32;
                if f64::from(narrow) == *f
                    && let Ok(short) = narrow.to_string().parse::<f64>()
                {
                    *f = short;
                }
            }
            Value::Table(t) => t.iter_mut().for_each(|(_, v)| visit(v)),
            Value::Array(a) => a.iter_mut().for_each(visit),
            _ => {}
        }
    }
    table.iter_mut().for_each(|(_, v)| visit(v));
}

/// `"ppo, recurrent_ppo, sac, discrete_sac, dqn"`.
fn algo_names() -> String {
    Algo::ALL.map(Algo::name).join(", ")
}

/// The algorithm tables of `algo` at their defaults, as TOML.
fn defaults(algo: Algo) -> Result<Table, ConfigError> {
    let mut config = Config {
        algo,
        env: String::new(),
        env_kwargs: EnvKwargs::new(),
        atari: None,
        stored_actions: StoredActions::Index,
        run: RunConfig::new(1),
        log: LogConfig::default(),
        policy: None,
        recurrent: None,
        ppo: None,
        sac: None,
        dqn: None,
        td3: None,
        off_policy: None,
        sequence: None,
    };
    match algo {
        Algo::Ppo | Algo::RecurrentPpo => {
            config.policy = Some(PolicyConfig::new());
            config.ppo = Some(PpoConfig::new());
            if algo == Algo::RecurrentPpo {
                config.recurrent = Some(Recurrent::default());
            }
        }
        Algo::Sac | Algo::DiscreteSac | Algo::Dqn | Algo::Td3 => {
            match algo {
                Algo::Dqn => config.dqn = Some(DqnConfig::default()),
                Algo::Td3 => config.td3 = Some(Td3Config::sb3()),
                _ => config.sac = Some(SacConfig::sb3()),
            }
            config.off_policy = Some(OffPolicyConfig::new());
        }
    }
    let mut table = Table::try_from(&config)
        .map_err(|e| ConfigError::new("", format!("defaults of {algo}: {e}")))?;
    // The user's values for these come in whole.
    for key in ["algo", "env", "run"] {
        table.remove(key);
    }
    Ok(table)
}

/// Minutes between a run directory's saves unless `run.checkpoint.every_minutes` says.
pub const CHECKPOINT_EVERY_MINUTES: f64 = 10.0;

/// A run directory saves its run periodically unless the config says otherwise: the
/// `run.checkpoint` keys the config leaves out take `every_minutes = 10` and
/// `at_eval = true` (a save after every scheduled evaluation).
fn checkpoint_defaults(table: &mut Table) {
    let Some(Value::Table(run)) = table.get_mut("run") else {
        return;
    };
    let checkpoint = run
        .entry("checkpoint")
        .or_insert_with(|| Value::Table(Table::new()));
    if let Value::Table(checkpoint) = checkpoint {
        checkpoint
            .entry("every_minutes")
            .or_insert(Value::Float(CHECKPOINT_EVERY_MINUTES));
        checkpoint.entry("at_eval").or_insert(Value::Boolean(true));
    }
}

/// Puts `defaults` under `table`: keys `table` lacks are added, and where both hold a
/// table the two merge (a partial `[sac.adam]` keeps SAC's other Adam values; a key the
/// defaults lack, such as an optional setting that is off by default, stays, and an
/// unknown key stays for deserialization to report). An enum variant is a table of one
/// key holding a table (`{ auto = { initial = 1.0 } }`): a `table` naming another
/// variant (or more than one) replaces the default whole. Any other value in `table`
/// wins.
fn merge(table: &mut Table, defaults: Table) {
    for (key, default) in defaults {
        match (table.get_mut(&key), default) {
            (None, default) => {
                table.insert(key, default);
            }
            (Some(Value::Table(mine)), Value::Table(default)) => {
                let other_variant = default.len() == 1
                    && default.values().all(Value::is_table)
                    && !(mine.len() == 1 && default.keys().all(|k| mine.contains_key(k)));
                if !other_variant {
                    merge(mine, default);
                }
            }
            _ => {}
        }
    }
}

/// Applies one `--set key=value`.
fn set(table: &mut Table, item: &str) -> Result<(), ConfigError> {
    let Some((key, text)) = item.split_once('=') else {
        return Err(ConfigError::new(
            "--set",
            format!("{item:?} has no '=': write KEY=VALUE, e.g. ppo.n_steps=64"),
        ));
    };
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::new(
            "--set",
            format!("{key:?} is not a dotted key: write e.g. run.total_steps=1000"),
        ));
    }
    let value = format!("v = {}", text.trim())
        .parse::<Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| Value::String(text.trim().to_owned()));
    let (last, path) = parts.split_last().unwrap_or((&"", &[]));
    let mut at = table;
    for (i, part) in path.iter().enumerate() {
        let entry = at
            .entry(part.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        at = match entry {
            Value::Table(t) => t,
            _ => {
                return Err(ConfigError::new(
                    parts[..=i].join("."),
                    format!("is a value, not a table: --set {key}=... cannot go inside it"),
                ));
            }
        };
    }
    at.insert(last.to_string(), value);
    Ok(())
}

/// The dotted key of a deserialization path (`"ppo.adam.lr"`).
fn key_of(path: &serde_path_to_error::Path) -> String {
    let text = path.to_string();
    if text == "." { String::new() } else { text }
}

/// Whether `name` can be a Python keyword argument's name (ASCII).
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
