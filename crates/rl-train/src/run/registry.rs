//! The environments a config can name, and how each algorithm is planned (from its
//! configuration and the environment's spaces, nothing built) and built for them.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::OnceLock;

use rl_algos::dqn::Dqn;
use rl_algos::policy::{
    ActorCritic, CategoricalPolicy, GaussianPolicy, PolicyConfig, RecurrentCategoricalPolicy,
};
use rl_algos::ppo::{Ppo, RecurrentPpo, RecurrentPpoConfig};
use rl_algos::sac::{ActionScoring, DiscreteSac, Sac};
use rl_algos::sequence::Recurrent;
use rl_algos::td3::Td3;
use rl_core::{Env, FeatureTable, MemoryPlan, Space};
use rl_envs::{
    CartPole, Catch, DeepSea, LargeDiscrete, MaskedCartPole, PartialLargeDiscrete, Pendulum,
};

use super::job::{self, Job, Outcome};
use super::{Error, Result};
use crate::config::{Algo, Config, ConfigError};

/// The kind of actions an environment takes, which decides the algorithms it fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionSpace {
    /// `n` discrete actions (`Env::Act = u32`): PPO, recurrent PPO, discrete SAC, DQN.
    Discrete(usize),
    /// A box of `dim` floats (`Env::Act = f32`): PPO, SAC.
    Box(usize),
}

/// The kind of `space`'s actions.
pub(crate) fn action_space(space: &Space) -> ActionSpace {
    match space {
        Space::Discrete { n } => ActionSpace::Discrete(*n as usize),
        other => ActionSpace::Box(other.flat_len()),
    }
}

impl ActionSpace {
    fn of(space: &Space) -> Self {
        action_space(space)
    }

    /// Whether `algo` can train on these actions.
    pub fn fits(self, algo: Algo) -> bool {
        match self {
            ActionSpace::Discrete(_) => !matches!(algo, Algo::Sac | Algo::Td3),
            ActionSpace::Box(_) => matches!(algo, Algo::Ppo | Algo::Sac | Algo::Td3),
        }
    }
}

impl fmt::Display for ActionSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ActionSpace::Discrete(n) => write!(f, "{n} discrete actions"),
            ActionSpace::Box(dim) => write!(f, "a box of {dim} continuous actions"),
        }
    }
}

/// One registered environment, with its action type known to the compiler.
pub(crate) trait Entry: Send + Sync {
    /// Its actions.
    fn actions(&self) -> ActionSpace;

    /// The whole run's memory plan of `config` on this environment, from the learner's
    /// blueprint: no learner, buffer or collector is built (an environment is, to read
    /// its spaces).
    fn plan(&self, config: &Config) -> Result<MemoryPlan>;

    /// Builds what `config` asks for on this environment and runs `job`. The
    /// environment made to build the learner is dropped before the job makes the run's
    /// own: a factory that keeps environments nobody stepped (the Python package's)
    /// hands it out again instead of making another.
    fn run(&self, config: &Config, job: Job<'_>) -> Result<Outcome>;

    /// Whether `algo` can train on this environment.
    fn fits(&self, algo: Algo) -> bool {
        self.actions().fits(algo)
    }

    /// The observation and action spaces (an environment is built to read them).
    fn spaces(&self) -> (Space, Space);
}

/// What [`Registry::list`] says of one environment.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvInfo {
    /// The name a config's `env` gives.
    pub name: String,
    /// Its observations.
    pub observation_space: Space,
    /// Its actions.
    pub action_space: Space,
    /// The algorithms that can train on it.
    pub algos: Vec<Algo>,
}

/// The spaces of `make(0)`.
fn spaces_of<E: Env>(make: impl Fn(u64) -> E) -> (Space, Space) {
    let env = make(0);
    (env.observation_space().clone(), env.action_space().clone())
}

/// `N` of the registered `deep_sea`.
const DEEP_SEA_SIZE: usize = 12;

/// Environments by name, each with a constructor from a seed: what a config's `env`
/// can name. [`Registry::builtin`] holds the reference environments; register your own
/// with [`Registry::register_discrete`] (`Env::Act = u32`) or
/// [`Registry::register_continuous`] (`Env::Act = f32`), then pass the registry to
/// [`train`](super::train) and friends (or the `rl` command's `rl::cli::run_command` for
/// the whole command line in your own binary).
///
/// An environment is built once per training environment (`make(seed)` with the seeds
/// of [`RunConfig::seed`](crate::trainer::RunConfig::seed)), once for evaluation,
/// and once to read the spaces.
pub struct Registry {
    entries: BTreeMap<String, Box<dyn Entry>>,
    /// The names whose constructors were built from the config's `env_kwargs`.
    with_kwargs: std::collections::BTreeSet<String>,
    /// The names whose constructors were built with the config's `[atari]` settings.
    atari: std::collections::BTreeSet<String>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("envs", &self.entries.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Registry {
    /// No environment.
    pub fn empty() -> Self {
        Self {
            entries: BTreeMap::new(),
            with_kwargs: std::collections::BTreeSet::new(),
            atari: std::collections::BTreeSet::new(),
        }
    }

    /// The reference environments: `cartpole`, `masked_cartpole`, `pendulum`,
    /// `large_discrete` (100 000 actions, task 0; discrete SAC scores them against its
    /// action feature table) and `partial_large_discrete` (the same task revealed a
    /// block per step), `catch` (bsuite's Catch as 10x5 frames of bytes, for
    /// convolutional encoders) and `deep_sea` (bsuite's DeepSea, 12 x 12, action
    /// mapping seed 0 whatever the run's seed, so that the training and evaluation
    /// environments of every run are one task: the deep-exploration test).
    pub fn builtin() -> Self {
        let mut registry = Self::empty();
        registry.register_pixels("catch", Catch::new);
        registry.register_discrete("cartpole", CartPole::new);
        registry.register_discrete("masked_cartpole", MaskedCartPole::new);
        registry.register_discrete("deep_sea", |_| {
            DeepSea::new(DEEP_SEA_SIZE, 0)
                .unwrap_or_else(|_| unreachable!("12 is a valid DeepSea size"))
        });
        registry.register_continuous("pendulum", Pendulum::new);
        registry.register_discrete_with_table(
            "large_discrete",
            |_| LargeDiscrete::new(0),
            |env: &LargeDiscrete| env.action_features().clone(),
        );
        registry.register_discrete_with_table(
            "partial_large_discrete",
            |_| PartialLargeDiscrete::new(0),
            |env: &PartialLargeDiscrete| env.action_features().clone(),
        );
        registry
    }

    /// Registers an environment with discrete actions under `name` (replacing one of
    /// that name). Nothing is built until a config names it.
    pub fn register_discrete<E, F>(&mut self, name: &str, make: F) -> &mut Self
    where
        E: Env<Obs = f32, Act = u32> + Send + 'static,
        F: Fn(u64) -> E + Clone + Send + Sync + 'static,
    {
        self.insert(name, Discrete::new(make, None))
    }

    /// Registers an environment with discrete actions and a feature row per action,
    /// which `table` reads from an environment (shared, not copied, for
    /// `FeatureTable`s): discrete SAC scores actions against it (a two-tower actor and
    /// critics) instead of one output per action.
    pub fn register_discrete_with_table<E, F, T>(
        &mut self,
        name: &str,
        make: F,
        table: T,
    ) -> &mut Self
    where
        E: Env<Obs = f32, Act = u32> + Send + 'static,
        F: Fn(u64) -> E + Clone + Send + Sync + 'static,
        T: Fn(&E) -> FeatureTable + Send + Sync + 'static,
    {
        self.insert(name, Discrete::new(make, Some(Box::new(table))))
    }

    /// Registers an environment whose observations are frames of bytes (`Env::Obs =
    /// u8`) and whose actions are discrete, under `name`: PPO and DQN train on it with
    /// a convolutional encoder (`policy.encoder` or `dqn.encoder`).
    pub fn register_pixels<E, F>(&mut self, name: &str, make: F) -> &mut Self
    where
        E: Env<Obs = u8, Act = u32> + Send + 'static,
        F: Fn(u64) -> E + Clone + Send + Sync + 'static,
    {
        self.insert(
            name,
            Pixels {
                make,
                actions: OnceLock::new(),
                _env: PhantomData,
            },
        )
    }

    /// Registers an environment with continuous (box) actions under `name`.
    pub fn register_continuous<E, F>(&mut self, name: &str, make: F) -> &mut Self
    where
        E: Env<Obs = f32, Act = f32> + Send + 'static,
        F: Fn(u64) -> E + Clone + Send + Sync + 'static,
    {
        self.insert(
            name,
            Continuous {
                make,
                actions: OnceLock::new(),
                _env: PhantomData,
            },
        )
    }

    fn insert(&mut self, name: &str, entry: impl Entry + 'static) -> &mut Self {
        self.entries.insert(name.to_owned(), Box::new(entry));
        self.with_kwargs.remove(name);
        self.atari.remove(name);
        self
    }

    /// Marks `name`'s constructor as built with the config's `[atari]` preprocessing (as
    /// the Python package does for an `ALE/...` id). A config with `[atari]` on an
    /// environment not marked is refused. Registering `name` again clears the mark.
    pub fn mark_atari_applied(&mut self, name: &str) -> &mut Self {
        if self.entries.contains_key(name) {
            self.atari.insert(name.to_owned());
        }
        self
    }

    /// Marks `name`'s constructor as built with the config's `env_kwargs` (as the Python
    /// package does for a Gymnasium id: `gymnasium.make(id, **env_kwargs)`). A config
    /// with `env_kwargs` on an environment not marked is refused: they would be ignored.
    /// Registering `name` again clears the mark.
    pub fn mark_env_kwargs_applied(&mut self, name: &str) -> &mut Self {
        if self.entries.contains_key(name) {
            self.with_kwargs.insert(name.to_owned());
        }
        self
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Every registered environment with its spaces and the algorithms that fit it, by
    /// name (each is built once to read its spaces).
    pub fn list(&self) -> Vec<EnvInfo> {
        self.entries
            .iter()
            .map(|(name, entry)| {
                let (observation_space, action_space) = entry.spaces();
                EnvInfo {
                    name: name.clone(),
                    observation_space,
                    action_space,
                    algos: Algo::ALL.into_iter().filter(|a| entry.fits(*a)).collect(),
                }
            })
            .collect()
    }

    /// The actions of environment `name`.
    pub fn actions(&self, name: &str) -> Option<ActionSpace> {
        self.entries.get(name).map(|e| e.actions())
    }

    /// The entry of `config.env`, checked against `config.algo`.
    pub(crate) fn entry(&self, config: &Config) -> Result<&dyn Entry> {
        let entry = self.entries.get(&config.env).ok_or_else(|| {
            // A Gymnasium id (`CartPole-v1`, `ALE/Pong-v5`) needs a Python host.
            let gymnasium = if config.env.contains('/') || config.env.contains("-v") {
                format!(
                    "; it looks like a Gymnasium id, which the Python package runs: `flatrl train CONFIG` (the wheel's command line) or flatrl.train(config, run_dir, env={:?})",
                    config.env
                )
            } else {
                String::new()
            };
            ConfigError::new(
                "env",
                format!(
                    "is {:?}, which is not registered: use one of {}{gymnasium}",
                    config.env,
                    self.names().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        if let Some(name) = config.env_kwargs.keys().next()
            && !self.with_kwargs.contains(&config.env)
        {
            return Err(ConfigError::new(
                format!("env_kwargs.{name}"),
                format!(
                    "is set, but env {:?} is built without keyword arguments (only a Gymnasium id run from Python, `flatrl train`, takes env_kwargs): remove env_kwargs",
                    config.env
                ),
            )
            .into());
        }
        if config.atari.is_some() && !self.atari.contains(&config.env) {
            return Err(ConfigError::new(
                "atari",
                format!(
                    "is set, but env {:?} is not an Atari game preprocessed by the library (an ALE/... id run from Python, `flatrl train`): remove [atari]",
                    config.env
                ),
            )
            .into());
        }
        let actions = entry.actions();
        if !entry.fits(config.algo) {
            let fitting: Vec<&str> = Algo::ALL
                .into_iter()
                .filter(|a| entry.fits(*a))
                .map(Algo::name)
                .collect();
            return Err(ConfigError::new(
                "algo",
                format!(
                    "is {:?}, which cannot train env {:?} with {actions}: use one of {}",
                    config.algo.name(),
                    config.env,
                    fitting.join(", ")
                ),
            )
            .into());
        }
        Ok(entry.as_ref())
    }

    /// [`Registry::entry`], and what only `rl plan` accepts refused for training.
    pub(crate) fn check(&self, config: &Config) -> Result<&dyn Entry> {
        let entry = self.entry(config)?;
        if config.stored_actions == crate::config::StoredActions::OneHot {
            return Err(ConfigError::new(
                "stored_actions",
                "is \"one_hot\", which only `rl plan` accepts (to show what one-hot stored actions would cost): the learners store indices, leave it out to train",
            )
            .into());
        }
        Ok(entry)
    }
}

/// Reads an environment's action feature table.
type TableOf<E> = Box<dyn Fn(&E) -> FeatureTable + Send + Sync>;

struct Discrete<E, F> {
    make: F,
    table: Option<TableOf<E>>,
    /// Read from `make(0)` when first asked.
    actions: OnceLock<ActionSpace>,
    _env: PhantomData<fn() -> E>,
}

impl<E, F> Discrete<E, F>
where
    E: Env<Obs = f32, Act = u32> + Send + 'static,
    F: Fn(u64) -> E + Clone + Send + Sync + 'static,
{
    fn new(make: F, table: Option<TableOf<E>>) -> Self {
        Self {
            make,
            table,
            actions: OnceLock::new(),
            _env: PhantomData,
        }
    }
}

/// The error of building a learner or policy whose settings were validated already.
fn build_error(e: rl_algos::Error) -> Error {
    Error::Algos(e)
}

/// The error of planning a learner: its settings' (a size whose bytes overflow, a rollout
/// too large) are config errors (exit code 2, nothing ran), naming the key.
fn plan_error(e: rl_algos::Error) -> Error {
    match e {
        rl_algos::Error::Config { .. } => Error::Config(ConfigError::from_algos(e, None)),
        other => Error::Algos(other),
    }
}

/// The error of planning or building a learner behind `[sequence]`: its settings'
/// errors are config errors naming the file's keys (`sequence.*`).
fn sequence_error(e: rl_algos::Error) -> Error {
    match e {
        rl_algos::Error::Config { .. } => Error::Config(ConfigError::from_sequence(e)),
        other => Error::Algos(other),
    }
}

/// The `[policy]` table of a PPO config.
fn policy_of(config: &Config) -> Result<&PolicyConfig> {
    config.policy.as_ref().ok_or_else(|| incomplete(config))
}

/// A config without the table its algorithm needs (a bug of the config layer).
fn incomplete(config: &Config) -> Error {
    Error::Usage(format!("the config of algo {} is incomplete", config.algo))
}

impl<E, F> Entry for Discrete<E, F>
where
    E: Env<Obs = f32, Act = u32> + Send + 'static,
    F: Fn(u64) -> E + Clone + Send + Sync + 'static,
{
    fn actions(&self) -> ActionSpace {
        *self
            .actions
            .get_or_init(|| ActionSpace::of((self.make)(0).action_space()))
    }

    fn spaces(&self) -> (Space, Space) {
        spaces_of(&self.make)
    }

    fn plan(&self, config: &Config) -> Result<MemoryPlan> {
        let env = (self.make)(0);
        let (obs, act) = (env.observation_space(), env.action_space());
        let n_envs = config.run.n_envs;
        match config.algo {
            Algo::Ppo => {
                let shape = <CategoricalPolicy>::shape_for(obs, act, policy_of(config)?)
                    .map_err(plan_error)?;
                let ppo = config.ppo.ok_or_else(|| incomplete(config))?;
                let learner = Ppo::<CategoricalPolicy>::blueprint(&shape, &ppo, n_envs)
                    .map_err(plan_error)?;
                job::on_policy_plan::<E, Ppo<CategoricalPolicy>>(&env, &learner, config)
            }
            Algo::RecurrentPpo => {
                let recurrent = config.recurrent.ok_or_else(|| incomplete(config))?;
                let shape = RecurrentCategoricalPolicy::shape_for(
                    obs,
                    act,
                    recurrent.history,
                    policy_of(config)?,
                )
                .map_err(plan_error)?;
                let ppo = config.ppo.ok_or_else(|| incomplete(config))?;
                let learner = RecurrentPpoConfig::new(ppo, recurrent.chunk_len);
                let learner =
                    RecurrentPpo::blueprint(&shape, &learner, n_envs).map_err(plan_error)?;
                job::on_policy_plan::<E, RecurrentPpo>(&env, &learner, config)
            }
            Algo::DiscreteSac => {
                let sac = config.sac.as_ref().ok_or_else(|| incomplete(config))?;
                let scoring = match &self.table {
                    Some(table) => {
                        let table = table(&env);
                        ActionScoring::Table {
                            rows: table.rows(),
                            dim: table.dim(),
                        }
                    }
                    None => ActionScoring::Index,
                };
                if let Some(memory) = &config.sequence {
                    let learner = Recurrent::<DiscreteSac>::blueprint(obs, memory, |summaries| {
                        DiscreteSac::blueprint(summaries, act, scoring, sac)
                    })
                    .map_err(sequence_error)?;
                    return job::off_policy_plan::<E, Recurrent<DiscreteSac>>(
                        &env, &learner, config,
                    );
                }
                let learner = DiscreteSac::blueprint(obs, act, scoring, sac).map_err(plan_error)?;
                job::off_policy_plan::<E, DiscreteSac>(&env, &learner, config)
            }
            Algo::Dqn => {
                let dqn = config.dqn.as_ref().ok_or_else(|| incomplete(config))?;
                if let Some(memory) = &config.sequence {
                    let learner = Recurrent::<Dqn>::blueprint(obs, memory, |summaries| {
                        Dqn::blueprint(summaries, act, dqn)
                    })
                    .map_err(sequence_error)?;
                    return job::off_policy_plan::<E, Recurrent<Dqn>>(&env, &learner, config);
                }
                let learner = Dqn::blueprint(obs, act, dqn).map_err(plan_error)?;
                job::off_policy_plan::<E, Dqn>(&env, &learner, config)
            }
            Algo::Sac | Algo::Td3 => Err(Error::Usage(format!(
                "algo {} cannot train env {:?} ({}): use discrete_sac",
                config.algo,
                config.env,
                self.actions()
            ))),
        }
    }

    fn run(&self, config: &Config, job: Job<'_>) -> Result<Outcome> {
        let env = (self.make)(0);
        let seed = config.run.seed;
        let missing = || Error::Usage(format!("the config of algo {} is incomplete", config.algo));
        match config.algo {
            Algo::Ppo => {
                let policy_config = config.policy.clone().ok_or_else(missing)?;
                let policy =
                    CategoricalPolicy::for_env(&env, policy_config, seed).map_err(build_error)?;
                let ppo = config.ppo.ok_or_else(missing)?;
                let learner =
                    Ppo::new(policy, ppo, config.run.n_envs, seed).map_err(build_error)?;
                drop(env);
                job::on_policy(self.make.clone(), learner, config, job)
            }
            Algo::RecurrentPpo => {
                let policy_config = config.policy.clone().ok_or_else(missing)?;
                let recurrent = config.recurrent.ok_or_else(missing)?;
                let policy = RecurrentCategoricalPolicy::for_env(
                    &env,
                    recurrent.history,
                    policy_config,
                    seed,
                )
                .map_err(build_error)?;
                let ppo = config.ppo.ok_or_else(missing)?;
                let learner = RecurrentPpoConfig::new(ppo, recurrent.chunk_len);
                let learner = RecurrentPpo::new(policy, learner, config.run.n_envs, seed)
                    .map_err(build_error)?;
                drop(env);
                job::on_policy(self.make.clone(), learner, config, job)
            }
            Algo::DiscreteSac if config.sequence.is_some() => {
                let sac = config.sac.clone().ok_or_else(missing)?;
                let memory = config.sequence.clone().ok_or_else(missing)?;
                let table = self.table.as_ref().map(|table| table(&env));
                let learner =
                    Recurrent::new(
                        env.observation_space(),
                        memory,
                        seed,
                        |summaries| match table {
                            Some(table) => DiscreteSac::with_table(
                                summaries,
                                env.action_space(),
                                table,
                                sac,
                                seed,
                            ),
                            None => {
                                DiscreteSac::with_index(summaries, env.action_space(), sac, seed)
                            }
                        },
                    )
                    .map_err(sequence_error)?;
                drop(env);
                job::off_policy(self.make.clone(), learner, config, job)
            }
            Algo::Dqn if config.sequence.is_some() => {
                let dqn = config.dqn.clone().ok_or_else(missing)?;
                let memory = config.sequence.clone().ok_or_else(missing)?;
                let learner = Recurrent::new(env.observation_space(), memory, seed, |summaries| {
                    Dqn::for_spaces(summaries, env.action_space(), dqn, seed)
                })
                .map_err(sequence_error)?;
                drop(env);
                job::off_policy(self.make.clone(), learner, config, job)
            }
            Algo::DiscreteSac => {
                let sac = config.sac.clone().ok_or_else(missing)?;
                let learner = match &self.table {
                    Some(table) => DiscreteSac::for_env_with_table(&env, table(&env), sac, seed),
                    None => DiscreteSac::for_env(&env, sac, seed),
                }
                .map_err(build_error)?;
                drop(env);
                job::off_policy(self.make.clone(), learner, config, job)
            }
            Algo::Dqn => {
                let dqn = config.dqn.clone().ok_or_else(missing)?;
                let learner = Dqn::for_env(&env, dqn, seed).map_err(build_error)?;
                drop(env);
                job::off_policy(self.make.clone(), learner, config, job)
            }
            Algo::Sac | Algo::Td3 => Err(Error::Usage(format!(
                "algo {} cannot train env {:?} ({}): use discrete_sac",
                config.algo,
                config.env,
                self.actions()
            ))),
        }
    }
}

struct Continuous<E, F> {
    make: F,
    /// Read from `make(0)` when first asked.
    actions: OnceLock<ActionSpace>,
    _env: PhantomData<fn() -> E>,
}

impl<E, F> Entry for Continuous<E, F>
where
    E: Env<Obs = f32, Act = f32> + Send + 'static,
    F: Fn(u64) -> E + Clone + Send + Sync + 'static,
{
    fn actions(&self) -> ActionSpace {
        *self
            .actions
            .get_or_init(|| ActionSpace::of((self.make)(0).action_space()))
    }

    fn spaces(&self) -> (Space, Space) {
        spaces_of(&self.make)
    }

    fn plan(&self, config: &Config) -> Result<MemoryPlan> {
        let env = (self.make)(0);
        let (obs, act) = (env.observation_space(), env.action_space());
        match config.algo {
            Algo::Ppo => {
                let shape =
                    GaussianPolicy::shape_for(obs, act, policy_of(config)?).map_err(plan_error)?;
                let ppo = config.ppo.ok_or_else(|| incomplete(config))?;
                let learner = Ppo::<GaussianPolicy>::blueprint(&shape, &ppo, config.run.n_envs)
                    .map_err(plan_error)?;
                job::on_policy_plan::<E, Ppo<GaussianPolicy>>(&env, &learner, config)
            }
            Algo::Sac => {
                let sac = config.sac.as_ref().ok_or_else(|| incomplete(config))?;
                let learner = Sac::blueprint(obs, act, sac).map_err(plan_error)?;
                job::off_policy_plan::<E, Sac>(&env, &learner, config)
            }
            Algo::Td3 => {
                let td3 = config.td3.as_ref().ok_or_else(|| incomplete(config))?;
                let learner = Td3::blueprint(obs, act, td3).map_err(plan_error)?;
                job::off_policy_plan::<E, Td3>(&env, &learner, config)
            }
            other => Err(Error::Usage(format!(
                "algo {other} cannot train env {:?} ({}): use ppo, sac or td3",
                config.env,
                self.actions()
            ))),
        }
    }

    fn run(&self, config: &Config, job: Job<'_>) -> Result<Outcome> {
        let env = (self.make)(0);
        let seed = config.run.seed;
        let missing = || Error::Usage(format!("the config of algo {} is incomplete", config.algo));
        match config.algo {
            Algo::Ppo => {
                let policy_config = config.policy.clone().ok_or_else(missing)?;
                let policy =
                    GaussianPolicy::for_env(&env, policy_config, seed).map_err(build_error)?;
                let ppo = config.ppo.ok_or_else(missing)?;
                let learner =
                    Ppo::new(policy, ppo, config.run.n_envs, seed).map_err(build_error)?;
                drop(env);
                job::on_policy(self.make.clone(), learner, config, job)
            }
            Algo::Sac => {
                let sac = config.sac.clone().ok_or_else(missing)?;
                let learner = Sac::for_env(&env, sac, seed).map_err(build_error)?;
                drop(env);
                job::off_policy(self.make.clone(), learner, config, job)
            }
            Algo::Td3 => {
                let td3 = config.td3.clone().ok_or_else(missing)?;
                let learner = Td3::for_env(&env, td3, seed).map_err(build_error)?;
                drop(env);
                job::off_policy(self.make.clone(), learner, config, job)
            }
            other => Err(Error::Usage(format!(
                "algo {other} cannot train env {:?} ({}): use ppo, sac or td3",
                config.env,
                self.actions()
            ))),
        }
    }
}

/// An environment of frames of bytes with discrete actions: PPO and DQN, each with a
/// convolutional encoder.
struct Pixels<E, F> {
    make: F,
    /// Read from `make(0)` when first asked.
    actions: OnceLock<ActionSpace>,
    _env: PhantomData<fn() -> E>,
}

impl<E, F> Pixels<E, F>
where
    E: Env<Obs = u8, Act = u32> + Send + 'static,
    F: Fn(u64) -> E + Clone + Send + Sync + 'static,
{
    fn refuse(&self, config: &Config) -> Error {
        ConfigError::new(
            "algo",
            format!(
                "is {:?}, which cannot train env {:?} (frames of bytes, {}): use ppo or dqn",
                config.algo.name(),
                config.env,
                self.actions()
            ),
        )
        .into()
    }
}

impl<E, F> Entry for Pixels<E, F>
where
    E: Env<Obs = u8, Act = u32> + Send + 'static,
    F: Fn(u64) -> E + Clone + Send + Sync + 'static,
{
    fn actions(&self) -> ActionSpace {
        *self
            .actions
            .get_or_init(|| ActionSpace::of((self.make)(0).action_space()))
    }

    fn spaces(&self) -> (Space, Space) {
        spaces_of(&self.make)
    }

    fn fits(&self, algo: Algo) -> bool {
        matches!(algo, Algo::Ppo | Algo::Dqn)
    }

    fn plan(&self, config: &Config) -> Result<MemoryPlan> {
        let env = (self.make)(0);
        let (obs, act) = (env.observation_space(), env.action_space());
        match config.algo {
            Algo::Ppo => {
                let shape = CategoricalPolicy::<u8>::shape_for(obs, act, policy_of(config)?)
                    .map_err(plan_error)?;
                let ppo = config.ppo.ok_or_else(|| incomplete(config))?;
                let learner =
                    Ppo::<CategoricalPolicy<u8>>::blueprint(&shape, &ppo, config.run.n_envs)
                        .map_err(plan_error)?;
                job::on_policy_plan::<E, Ppo<CategoricalPolicy<u8>>>(&env, &learner, config)
            }
            Algo::Dqn => {
                let dqn = config.dqn.as_ref().ok_or_else(|| incomplete(config))?;
                let learner = Dqn::<u8>::blueprint_for(obs, act, dqn).map_err(plan_error)?;
                job::off_policy_plan::<E, Dqn<u8>>(&env, &learner, config)
            }
            _ => Err(self.refuse(config)),
        }
    }

    fn run(&self, config: &Config, job: Job<'_>) -> Result<Outcome> {
        let env = (self.make)(0);
        let seed = config.run.seed;
        match config.algo {
            Algo::Ppo => {
                let policy_config = policy_of(config)?.clone();
                let policy = CategoricalPolicy::<u8>::for_env(&env, policy_config, seed)
                    .map_err(build_error)?;
                let ppo = config.ppo.ok_or_else(|| incomplete(config))?;
                let learner =
                    Ppo::new(policy, ppo, config.run.n_envs, seed).map_err(build_error)?;
                drop(env);
                job::on_policy(self.make.clone(), learner, config, job)
            }
            Algo::Dqn => {
                let dqn = config.dqn.clone().ok_or_else(|| incomplete(config))?;
                let learner = Dqn::<u8>::for_env(&env, dqn, seed).map_err(build_error)?;
                drop(env);
                job::off_policy(self.make.clone(), learner, config, job)
            }
            _ => Err(self.refuse(config)),
        }
    }
}
