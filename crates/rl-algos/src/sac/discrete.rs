//! SAC for discrete actions, expectations over the whole policy computed in chunks.

use std::fmt;
use std::sync::Arc;

use rl_actions::{ActionMask, ChunkedScorer, Masks, Sampling, ScorerShape};
use rl_collect::{ActOutput, Policy, PolicyError};
use rl_core::{DType, Env, FeatureTable, Location, MemoryPlan, Schema, Space, TransitionSchema};
use rl_storage::Batch;

use rand_xoshiro::Xoshiro256PlusPlus;
use rl_nn::{
    Adam, Architecture, Checkpoint, Mlp, MlpWorkspace, Module, NetworkState, Parameters,
    TensorSpec, Weights,
};

use super::{
    ACT_ROWS, ActorPasses, Core, CoreShape, DiscreteSacActor, SacConfig, SacState, SacStats,
    Transitions, heads,
};
use crate::error::{Error, Result};
use crate::learner::{OffPolicyBlueprint, Scaled, Sizes};
use crate::policy::{Mode, describe};

/// The `kind` of discrete SAC checkpoints.
pub const CHECKPOINT_KIND: &str = "discrete_sac";

/// The checkpoint name of a learned action table.
const TABLE: &str = "action_table";

/// Christodoulou's default target entropy, as a fraction of the maximum `ln n`.
const TARGET_ENTROPY_RATIO: f32 = 0.98;

/// Soft actor-critic for discrete actions (Christodoulou 2019): the critic target and the
/// actor loss are exact expectations over the policy's full distribution, never samples,
/// computed `chunk` actions at a time by an [`rl_actions::ChunkedScorer`], so that memory
/// stays `batch x chunk` floats for any number of actions.
///
/// The networks are two-tower: the actor maps an observation to a `d`-vector `u(s)` and
/// `pi(a | s) = softmax_a <u(s), f_a>`; each critic maps it to `g_i(s)` with
/// `Q_i(s, a) = <g_i(s), f_a>`, where `f_a` is action `a`'s row of a representation:
///
/// - [`DiscreteSac::with_table`]: a feature table shared by the environment (for
///   instance `LargeDiscrete::action_features()`, 100 000 x 8): `d` is the table's width,
///   so the networks' output layers stay small whatever `n`.
/// - [`DiscreteSac::with_index`]: the index / one-hot representation, `f_a = e_a`: the
///   classic discrete SAC whose networks output one value per action (`d = n`).
///
/// Losses (batch means): critics `0.5 (MSE(Q1(s, a), y) + MSE(Q2(s, a), y))` with
/// `y = r + gamma (1 - terminated) sum_a' pi(a' | s') (min_i Q'_i(s', a') - alpha log pi(a' |
/// s'))` (rows that terminated skip the sum entirely); actor
/// `sum_a pi(a | s) (alpha log pi(a | s) - min_i Q_i(s, a))`; entropy coefficient towards
/// `0.98 ln n` unless [`SacConfig::target_entropy`] says otherwise (for 100 000 actions a
/// lower target, such as `0.6 ln n`, lets the policy concentrate).
///
/// Memory: everything an update touches is allocated at construction and listed by
/// [`DiscreteSac::memory_plan`](crate::learner::Learner::memory_plan); beyond parameters, gradients and moments, an update over
/// 100 000 actions at batch 256 and chunk 2048 holds at most 4 x `batch x chunk` floats
/// (3.45 x measured, by the crate's tests). The actions stored in the replay buffer are
/// `u32` indices; any index at or above `n` is an [`Error::ActionOutOfRange`], never
/// clamped.
#[derive(Clone, Debug)]
pub struct DiscreteSac {
    pub(super) core: Core,
    /// What it holds, planned before it was built ([`DiscreteSac::blueprint`]; with
    /// masks or observation gradients, as they were added).
    blueprint: OffPolicyBlueprint,
    /// How it scores actions, and what was added since it was built (to plan again).
    scoring: ActionScoring,
    extras: Extras,
    obs_dim: usize,
    n: u32,
    scorer: ChunkedScorer,
    passes: ActorPasses,
    scratch: Scratch,
    /// Gradients and optimiser of a learned table.
    learning: Option<TableLearning>,
    /// Per-state available actions, when the environment restricts them.
    masking: Option<Masking>,
}

/// How a [`DiscreteSac`] represents its actions, by size alone: what
/// [`DiscreteSac::blueprint`] plans with before the learner (or a private copy of a
/// table) exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionScoring {
    /// One network output per action ([`DiscreteSac::with_index`]).
    Index,
    /// A fixed, shared feature table of `rows` actions x `dim` features
    /// ([`DiscreteSac::with_table`]).
    Table {
        /// Actions (the table's rows).
        rows: usize,
        /// Features per action.
        dim: usize,
    },
    /// A learned table starting from one of `rows x dim`
    /// ([`DiscreteSac::with_learnable_table`]).
    LearnedTable {
        /// Actions (the table's rows).
        rows: usize,
        /// Features per action.
        dim: usize,
    },
}

impl ActionScoring {
    /// The scoring of `table`: fixed (shared) or learned.
    fn of(table: &FeatureTable, learned: Learned) -> Self {
        let (rows, dim) = (table.rows(), table.dim());
        match learned {
            Learned::Fixed => Self::Table { rows, dim },
            Learned::Learned => Self::LearnedTable { rows, dim },
        }
    }

    /// The scorer's shape and the vectors' width `d` for `n` actions.
    fn scorer(self, n: u32) -> (ScorerShape, usize) {
        match self {
            Self::Index => (ScorerShape::Identity { n: n as usize }, n as usize),
            Self::Table { rows, dim } | Self::LearnedTable { rows, dim } => {
                (ScorerShape::Table { rows, dim }, dim)
            }
        }
    }
}

/// Whether a table is learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Learned {
    Fixed,
    Learned,
}

/// What a built discrete SAC adds to the plan of its configuration: per-state action
/// masks ([`DiscreteSac::with_action_masks`]), the observations' gradient (behind a
/// summarizer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Extras {
    masked: bool,
    obs_grads: bool,
}

/// Which actions are available in a state: fills `mask` (every action available on entry)
/// for the observation `obs`. See [`DiscreteSac::with_action_masks`].
pub type ActionMaskFn = dyn Fn(&[f32], &mut ActionMask) + Send + Sync;

/// The mask function and one reused mask per row it is evaluated on.
#[derive(Clone)]
struct Masking {
    available: Arc<ActionMaskFn>,
    batch: Vec<ActionMask>,
    next: Vec<ActionMask>,
    act: Vec<ActionMask>,
}

impl fmt::Debug for Masking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Masking")
            .field("rows", &self.batch.len())
            .finish_non_exhaustive()
    }
}

impl Masking {
    /// Evaluates the mask function on `rows` observations into `masks`.
    fn fill(available: &ActionMaskFn, obs: &[f32], obs_dim: usize, masks: &mut [ActionMask]) {
        for (o, mask) in obs.chunks_exact(obs_dim).zip(masks.iter_mut()) {
            mask.allow_all();
            available(o, mask);
        }
    }
}

/// A table learned from the critics' loss: `dL/df_a = sum_i dL/dQ_i g_i(s)` over the
/// batch rows that took action `a`, with its own Adam.
#[derive(Clone, Debug)]
struct TableLearning {
    grads: Vec<f32>,
    adam: Adam,
}

/// Per-update buffers, sized for `batch_size` rows and the critics' heads at
/// construction (`heads.rs` for the heads).
#[derive(Clone, Debug)]
struct Scratch {
    /// Rows whose transition did not terminate, and their next observations.
    live: Vec<usize>,
    next_live: Vec<f32>,
    /// Actor and target-critic vectors (every head) at the live next observations, one
    /// head of them, and their values (head-major: head `k`'s at `k rows ..`).
    u_next: Vec<f32>,
    g_next: [Vec<f32>; 2],
    head_next: [Vec<f32>; 2],
    v_next: Vec<f32>,
    /// Targets, head-major (`heads x rows`).
    target: Vec<f32>,
    q: Vec<f32>,
    dq: Vec<f32>,
    /// Gradient with respect to a critic's output vectors (every head), and one head's.
    dg: Vec<f32>,
    dg_head: Vec<f32>,
    /// One head of a critic's vectors at the batch's observations.
    head: Vec<f32>,
    /// Critic vectors at the batch's observations (after the critic step; the heads'
    /// mean).
    g: [Vec<f32>; 2],
    loss_rows: Vec<f32>,
    entropy_rows: Vec<f32>,
    /// Gradient with respect to the actor's output vectors.
    du: Vec<f32>,
    act_scores: Vec<f32>,
    /// The second critic's gradient with respect to the observations (for a summarizer
    /// in front; empty otherwise).
    d_obs: Vec<f32>,
    /// Each row's bootstrap mask (with [`SacConfig::ensemble`] only; empty otherwise).
    masks: Vec<i64>,
}

impl Scratch {
    /// Bytes of [`Scratch::new`] for `rows` rows and `heads` critic heads, before it
    /// exists (the observations' gradient and the masks apart): per row the next
    /// observation, `3 heads + 6` `d`-vectors (the target critics at the next
    /// observation, the critics' output gradient; the actor at the next observation,
    /// one head of each target critic, one head's output gradient and vectors, the
    /// critics' mean vectors, the actor's output gradient), `2 heads + 4` scalars and a
    /// live-row index; `ACT_ROWS` scores for acting.
    fn bytes_for(rows: usize, obs: usize, d: usize, heads: usize) -> Result<u64> {
        let sizes = Sizes::of("sac.batch_size");
        let vectors = sizes.add(&[sizes.count(&[3, heads])?, 6])?;
        let scalars = sizes.add(&[sizes.count(&[2, heads])?, 4])?;
        let per_row = sizes.add(&[obs, sizes.count(&[vectors, d])?, scalars])?;
        let floats = sizes.add(&[sizes.count(&[rows, per_row])?, ACT_ROWS])?;
        sizes.sum(&[
            sizes.f32s(&[floats])?,
            sizes.bytes(&[rows, size_of::<usize>()])?,
        ])
    }

    fn new(rows: usize, obs: usize, d: usize, heads: usize, masked: bool) -> Self {
        let z = |n: usize| vec![0.0; n];
        let kd = heads * d;
        Self {
            live: Vec::with_capacity(rows),
            next_live: z(rows * obs),
            u_next: z(rows * d),
            g_next: [z(rows * kd), z(rows * kd)],
            head_next: [z(rows * d), z(rows * d)],
            v_next: z(rows * heads),
            target: z(rows * heads),
            q: z(rows),
            dq: z(rows),
            dg: z(rows * kd),
            dg_head: z(rows * d),
            head: z(rows * d),
            g: [z(rows * d), z(rows * d)],
            loss_rows: z(rows),
            entropy_rows: z(rows),
            du: z(rows * d),
            act_scores: z(ACT_ROWS),
            d_obs: Vec::new(),
            masks: vec![0; if masked { rows } else { 0 }],
        }
    }
}

/// Critic heads of `config`: 1 without an ensemble.
fn heads_of(config: &SacConfig) -> usize {
    config.ensemble.map_or(1, |e| e.heads as usize)
}

impl DiscreteSac {
    /// A trainer whose actions are scored against `table` (`n x d`, shared, never
    /// copied): the two-tower form for large action spaces. `seed` seeds the networks
    /// and the action noise (a run passes its `RunConfig::seed`).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] if the observation space is not an `f32` box, the action
    /// space is not discrete, or the table has another number of rows than the space has
    /// actions; [`Error::Config`] for an invalid configuration.
    pub fn with_table(
        observation_space: &Space,
        action_space: &Space,
        table: FeatureTable,
        config: SacConfig,
        seed: u64,
    ) -> Result<Self> {
        let n = discrete_n(action_space)?;
        check_table_rows(&table, n, action_space)?;
        let rows = config.batch_size.max(ACT_ROWS);
        let side = format!(
            "{n} scored by a fixed {}x{} table",
            table.rows(),
            table.dim()
        );
        let scoring = ActionScoring::of(&table, Learned::Fixed);
        let blueprint = Self::blueprint(observation_space, action_space, scoring, &config)?;
        let scorer = ChunkedScorer::new(table, config.chunk, rows)?;
        Self::build(
            observation_space,
            n,
            scorer,
            config,
            seed,
            side,
            blueprint,
            scoring,
        )
    }

    /// As [`DiscreteSac::with_table`], but the table is learned: it starts from
    /// `initial` (copied once: the environment's handle keeps the original) and follows
    /// the gradient of the critics' loss with its own Adam (the configuration's learning
    /// rate); the actor scores against the current table. Costs `4 x n x d` floats
    /// (values, gradients, two moments) and, per update, an Adam step and a re-transpose
    /// over the table (about 2 ms for 100 000 x 8 here). Checkpoints include the table.
    ///
    /// # Errors
    /// As [`DiscreteSac::with_table`].
    pub fn with_learnable_table(
        observation_space: &Space,
        action_space: &Space,
        initial: FeatureTable,
        config: SacConfig,
        seed: u64,
    ) -> Result<Self> {
        let n = discrete_n(action_space)?;
        check_table_rows(&initial, n, action_space)?;
        let scoring = ActionScoring::of(&initial, Learned::Learned);
        let blueprint = Self::blueprint(observation_space, action_space, scoring, &config)?;
        let (rows, dim) = (initial.rows(), initial.dim());
        let adam = Adam::new(rows * dim, config.adam)?;
        let side = format!("{n} scored by a learned {rows}x{dim} table");
        let scorer = ChunkedScorer::new(initial, config.chunk, config.batch_size.max(ACT_ROWS))?;
        let mut sac = Self::build(
            observation_space,
            n,
            scorer,
            config,
            seed,
            side,
            blueprint,
            scoring,
        )?;
        // Take the private copy now, so that it is allocated (and planned) up front.
        sac.scorer.update_table(|_| ())?;
        sac.learning = Some(TableLearning {
            grads: vec![0.0; rows * dim],
            adam,
        });
        Ok(sac)
    }

    /// A trainer with the index (one-hot) representation: the networks output one value
    /// per action, the classic discrete SAC. Its buffers scale with `batch x n`: for huge
    /// `n` use [`DiscreteSac::with_table`].
    ///
    /// # Errors
    /// As [`DiscreteSac::with_table`].
    pub fn with_index(
        observation_space: &Space,
        action_space: &Space,
        config: SacConfig,
        seed: u64,
    ) -> Result<Self> {
        let n = discrete_n(action_space)?;
        let scoring = ActionScoring::Index;
        let blueprint = Self::blueprint(observation_space, action_space, scoring, &config)?;
        let rows = config.batch_size.max(ACT_ROWS);
        let scorer = ChunkedScorer::identity(n, config.chunk, rows)?;
        Self::build(
            observation_space,
            n,
            scorer,
            config,
            seed,
            format!("{n} by index"),
            blueprint,
            scoring,
        )
    }

    /// [`DiscreteSac::with_table`] with `env`'s spaces.
    ///
    /// # Errors
    /// As [`DiscreteSac::with_table`].
    pub fn for_env_with_table<E: Env<Obs = f32, Act = u32>>(
        env: &E,
        table: FeatureTable,
        config: SacConfig,
        seed: u64,
    ) -> Result<Self> {
        Self::with_table(
            env.observation_space(),
            env.action_space(),
            table,
            config,
            seed,
        )
    }

    /// [`DiscreteSac::with_index`] with `env`'s spaces.
    ///
    /// # Errors
    /// As [`DiscreteSac::with_index`].
    pub fn for_env<E: Env<Obs = f32, Act = u32>>(
        env: &E,
        config: SacConfig,
        seed: u64,
    ) -> Result<Self> {
        Self::with_index(env.observation_space(), env.action_space(), config, seed)
    }

    /// What a learner for `observation_space` and `action_space` scoring actions by
    /// `scoring`, with `config`, holds, reads and asks of its actors, from the sizes
    /// alone: nothing is allocated (the table, if any, is the environment's). The
    /// constructors plan the same (the learner's
    /// [`memory_plan`](crate::learner::Learner::memory_plan) is this blueprint's, with
    /// [`DiscreteSac::with_action_masks`]' masks added) and refuse what this refuses.
    ///
    /// # Errors
    /// As [`DiscreteSac::with_table`]; [`Error::Config`] for sizes whose bytes overflow.
    pub fn blueprint(
        observation_space: &Space,
        action_space: &Space,
        scoring: ActionScoring,
        config: &SacConfig,
    ) -> Result<OffPolicyBlueprint> {
        let n = discrete_n(action_space)?;
        if let ActionScoring::Table { rows, .. } | ActionScoring::LearnedTable { rows, .. } =
            scoring
            && rows != n as usize
        {
            return Err(Error::SpaceMismatch {
                what: "action space",
                expected: format!("a discrete space of {rows} actions (the action table's rows)"),
                actual: describe(action_space),
            });
        }
        Self::plan(
            obs_dim(observation_space)?,
            n,
            scoring,
            config,
            Extras::default(),
        )
    }

    /// [`DiscreteSac::blueprint`] with what was added to a built learner.
    fn plan(
        obs_dim: usize,
        n: u32,
        scoring: ActionScoring,
        config: &SacConfig,
        extras: Extras,
    ) -> Result<OffPolicyBlueprint> {
        config.validate()?;
        let (scorer, d) = scoring.scorer(n);
        let heads = heads_of(config);
        let critic_out = Sizes::of("sac.ensemble.heads").count(&[heads, d])?;
        let shape = CoreShape::new(config, (obs_dim, d), (obs_dim, critic_out))?;
        let rows = config.batch_size;
        let sizes = Sizes::of("sac.batch_size");
        let mut plan = shape.plan(rows)?;
        let scorer_plan = ChunkedScorer::plan(scorer, config.chunk, rows.max(ACT_ROWS))
            .map_err(|e| Error::config("sac.chunk", e.to_string()))?;
        plan.nest("sac", &scorer_plan);
        plan.add(
            "sac/update buffers",
            Location::Ram,
            Scratch::bytes_for(rows, obs_dim, d, heads)?,
        );
        if config.ensemble.is_some() {
            // Drawn when the batch is sampled, as DQN's (`dqn/ensemble.rs` says why).
            plan.add(
                format!("sac/bootstrap masks ({heads} critic heads, one i64 per batch row)"),
                Location::Ram,
                sizes.bytes(&[rows, size_of::<i64>()])?,
            );
        }
        let words = (n as usize).div_ceil(64);
        let mask_bytes = |rows: usize| sizes.bytes(&[rows, words, size_of::<u64>()]);
        if extras.masked {
            plan.add(
                "sac/action masks (one per row)",
                Location::Ram,
                mask_bytes(sizes.add(&[rows, rows, ACT_ROWS])?)?,
            );
        }
        let table = match scoring {
            ActionScoring::Index => None,
            ActionScoring::Table { rows, dim } | ActionScoring::LearnedTable { rows, dim } => {
                Some(Sizes::of("action table").f32s(&[rows, dim])?)
            }
        };
        let learned = matches!(scoring, ActionScoring::LearnedTable { .. });
        if let (Some(table), true) = (table, learned) {
            // The table itself is the scorer's table line (its private copy here).
            plan.add("sac/learned table gradients", Location::Ram, table);
            plan.add(
                "sac/learned table/adam moments",
                Location::Ram,
                sizes.sum(&[table, table])?,
            );
        }
        if extras.obs_grads {
            let (name, bytes) = obs_grads_line(rows, obs_dim)?;
            plan.add(name, Location::Ram, bytes);
        }
        let schema = TransitionSchema::new(DType::F32, &[obs_dim], DType::U32, &[])
            .with_next_obs()
            .build()?;
        let mut blueprint = OffPolicyBlueprint::new(plan, schema, rows);
        // An actor's scorer holds ACT_ROWS rows of the learner's per-row buffers.
        let acting_scorer: u64 = ChunkedScorer::plan(scorer, config.chunk, ACT_ROWS)
            .map_err(|e| Error::config("sac.chunk", e.to_string()))?
            .lines()
            .iter()
            .filter(|line| !line.component.contains("table"))
            .map(|line| line.bytes)
            .sum();
        let masks = if extras.masked {
            mask_bytes(ACT_ROWS)?
        } else {
            0
        };
        let each = sizes.sum(&[
            shape.actor_copy_bytes()?,
            sizes.f32s(&[ACT_ROWS])?,
            acting_scorer,
            masks,
        ])?;
        blueprint.actor.push(Scaled::per(
            "discrete sac actor x",
            " (weights, workspace, scorer, masks)",
            each,
        ));
        match (table, learned) {
            (Some(table), true) => blueprint.actor.push(Scaled::per(
                "discrete sac actor x",
                " (learned table and transposed copy)",
                sizes.sum(&[table, table])?,
            )),
            (Some(table), false) => blueprint.actor.push(Scaled::shared(
                "discrete sac actors (transposed table, shared)",
                table,
            )),
            (None, _) => {}
        }
        Ok(blueprint)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "private, called by the three constructors"
    )]
    fn build(
        observation_space: &Space,
        n: u32,
        scorer: ChunkedScorer,
        config: SacConfig,
        seed: u64,
        action_side: String,
        blueprint: OffPolicyBlueprint,
        scoring: ActionScoring,
    ) -> Result<Self> {
        let obs_dim = obs_dim(observation_space)?;
        let d = scorer.dim();
        let rows = config.batch_size;
        let heads = heads_of(&config);
        let masked = config.ensemble.is_some();
        let core = Core::new(
            config,
            seed,
            obs_dim,
            d,
            obs_dim,
            heads * d,
            TARGET_ENTROPY_RATIO * (n as f32).ln(),
            action_side,
        )?;
        Ok(Self {
            obs_dim,
            n,
            passes: ActorPasses::new(&core.actor, rows),
            scratch: Scratch::new(rows, obs_dim, d, heads, masked),
            scorer,
            core,
            learning: None,
            masking: None,
            blueprint,
            scoring,
            extras: Extras::default(),
        })
    }

    /// Plans again with `extras` (what was added since the learner was built).
    fn replan(&mut self, extras: Extras) -> Result<()> {
        self.blueprint = Self::plan(
            self.obs_dim,
            self.n,
            self.scoring,
            &self.core.config,
            extras,
        )?;
        self.extras = extras;
        Ok(())
    }

    /// Restricts actions per state: `available(obs, mask)` marks which actions `obs`
    /// allows (`mask` starts with every action available). The policy then gives
    /// unavailable actions probability 0 when acting, in the actor loss and in the soft
    /// value of next states; a state with no available action is an error. Masks are
    /// computed from observations when needed, never stored in the replay buffer (a
    /// bitset per transition would cost `n / 8` bytes, 12.5 kB for 100 000 actions);
    /// the trainer keeps one reused mask per batch row (see its memory plan).
    #[must_use]
    pub fn with_action_masks(
        mut self,
        available: impl Fn(&[f32], &mut ActionMask) + Send + Sync + 'static,
    ) -> Self {
        let rows = self.core.config.batch_size;
        self.masking = Some(Masking {
            available: Arc::new(available),
            batch: vec![ActionMask::all(self.n); rows],
            next: vec![ActionMask::all(self.n); rows],
            act: vec![ActionMask::all(self.n); ACT_ROWS],
        });
        let extras = Extras {
            masked: true,
            ..self.extras
        };
        // The masks were just allocated, so their bytes fit: planning them cannot fail.
        self.replan(extras)
            .expect("the plan of masks that were allocated");
        self
    }

    /// Number of actions.
    pub fn actions(&self) -> u32 {
        self.n
    }

    /// The action table scores are computed against (the learned values for
    /// [`DiscreteSac::with_learnable_table`]); `None` for the index representation.
    pub fn action_table(&self) -> Option<&FeatureTable> {
        self.scorer.table()
    }

    /// The replay columns [`DiscreteSac::update`] reads (and collectors write): `obs`
    /// f32, `action` u32 (an index, 4 bytes whatever `n`), `reward` f32, `terminated`
    /// and `truncated` bool, `next_obs` f32.
    ///
    /// # Errors
    /// None in practice (the schema is valid by construction).
    pub fn replay_schema(&self) -> Result<Schema> {
        Ok(self.blueprint.replay_schema.clone())
    }

    /// One gradient step (critics, actor, entropy coefficient, then the targets every
    /// `target_update_interval` steps) on a batch with [`DiscreteSac::replay_schema`]'s
    /// columns.
    ///
    /// # Errors
    /// [`Error::Storage`] for a batch without those columns,
    /// [`Error::ActionOutOfRange`] for an action index out of range,
    /// [`Error::ShapeMismatch`] for columns of other widths or more rows than
    /// `batch_size`, [`Error::Diverged`] for a non-finite loss (as [`crate::sac::Sac::update`]:
    /// nothing applied for the critic loss; for the actor loss the critics, and a learned
    /// table, have already stepped).
    pub fn update(&mut self, batch: &Batch) -> Result<SacStats> {
        let transitions =
            Transitions::<u32>::read(batch, self.core.config.batch_size, self.obs_dim, 1)?;
        self.update_transitions(transitions, None)
    }

    /// [`DiscreteSac::update`] on transitions already read, writing the critics' loss
    /// gradient with respect to the observations into `obs_grads` (`rows x obs_dim`)
    /// when given: what a history summarizer in front of the critics trains on.
    pub(crate) fn update_transitions(
        &mut self,
        transitions: Transitions<'_, u32>,
        mut obs_grads: Option<&mut [f32]>,
    ) -> Result<SacStats> {
        let obs_dim = self.obs_dim;
        let d = self.scorer.dim();
        let Transitions {
            rows,
            obs,
            actions,
            rewards,
            terminated,
            next_obs,
            positions,
        } = transitions;
        let heads = heads_of(&self.core.config);
        let kd = heads * d;
        if let Some(grads) = &obs_grads {
            if grads.len() != rows * obs_dim {
                return Err(Error::shape(
                    "observation gradients",
                    rows * obs_dim,
                    grads.len(),
                ));
            }
            if self.scratch.d_obs.len() < rows * obs_dim {
                return Err(Error::config(
                    "observation gradients",
                    "were not enabled: call enable_obs_grads first",
                ));
            }
        }
        if let Some((row, &action)) = actions.iter().enumerate().find(|(_, a)| **a >= self.n) {
            return Err(Error::ActionOutOfRange {
                row,
                action,
                actions: self.n as usize,
            });
        }
        let core = &mut self.core;
        let s = &mut self.scratch;
        let n = rows as f32;
        let alpha = core.temperature.alpha();
        if let Some(ensemble) = core.config.ensemble {
            crate::dqn::draw_masks(
                ensemble,
                core.seed,
                core.updates,
                positions,
                &mut s.masks[..rows],
            )?;
        }
        let masks = core.config.ensemble.map(|_| &s.masks[..rows]);

        // Soft values of the next observations, for rows that did not terminate.
        s.live.clear();
        s.live.extend((0..rows).filter(|&b| terminated[b].0 == 0));
        let live = s.live.len();
        for (dst, &b) in s.next_live.chunks_exact_mut(obs_dim).zip(&s.live) {
            dst.copy_from_slice(&next_obs[b * obs_dim..(b + 1) * obs_dim]);
        }
        if let Some(masking) = &mut self.masking {
            let available = &*masking.available;
            Masking::fill(available, obs, obs_dim, &mut masking.batch[..rows]);
            let next = &s.next_live[..live * obs_dim];
            Masking::fill(available, next, obs_dim, &mut masking.next[..live]);
            // Checked here, before anything changes, rather than by the scorer mid-update.
            let empty = |masks: &[ActionMask]| masks.iter().position(|m| m.count_allowed() == 0);
            if let Some(row) = empty(&masking.batch[..rows]) {
                return Err(Error::config(
                    "action masks",
                    format!(
                        "allow no action for the observation of batch row {row}: every state needs one"
                    ),
                ));
            }
            if let Some(i) = empty(&masking.next[..live]) {
                return Err(Error::config(
                    "action masks",
                    format!(
                        "allow no action for the next observation of batch row {}: a state that \
                         does not end its episode needs one",
                        s.live[i]
                    ),
                ));
            }
        }
        for k in 0..heads {
            s.target[k * rows..(k + 1) * rows].copy_from_slice(rewards);
        }
        // gamma 0 multiplies every next value by 0: none is computed (with 100 000
        // actions and several heads they are most of an update's work).
        if live > 0 && core.config.gamma != 0.0 {
            let next = &s.next_live[..live * obs_dim];
            let u = core.actor.forward(next, live, &mut self.passes.next)?;
            s.u_next[..live * d].copy_from_slice(u);
            for i in 0..2 {
                let g =
                    core.critics.target[i].forward(next, live, &mut core.critics.target_ws[i])?;
                s.g_next[i][..live * kd].copy_from_slice(g);
            }
            let [g0, g1] = &s.g_next;
            let [h0, h1] = &mut s.head_next;
            for k in 0..heads {
                let head = [
                    heads::head_of(g0, live, d, heads, k, h0),
                    heads::head_of(g1, live, d, heads, k, h1),
                ];
                let v = &mut s.v_next[k * rows..k * rows + live];
                self.scorer.soft_value(
                    &s.u_next[..live * d],
                    head,
                    alpha,
                    self.masking
                        .as_ref()
                        .map_or(Masks::None, |m| Masks::PerRow(&m.next[..live])),
                    v,
                )?;
                for (&b, &v) in s.live.iter().zip(&*v) {
                    s.target[k * rows + b] += core.config.gamma * v;
                }
            }
        }

        // Critics on the stored actions, head by head (one head: the plain loss).
        let mut critic_loss = 0.0;
        for i in 0..2 {
            let critic = &core.critics.online[i];
            let g = critic.forward(obs, rows, &mut core.critics.ws[i])?;
            let dg = &mut s.dg[..rows * kd];
            dg.fill(0.0);
            for k in 0..heads {
                let head = heads::head_of(g, rows, d, heads, k, &mut s.head);
                self.scorer.action_scores(head, actions, &mut s.q[..rows])?;
                critic_loss += heads::masked_half_squared_error(
                    &s.q[..rows],
                    &s.target[k * rows..(k + 1) * rows],
                    masks,
                    k,
                    &mut s.dq[..rows],
                ) / heads as f32;
                if let Some(learning) = &mut self.learning {
                    for ((&a, &dq), gb) in
                        actions.iter().zip(&s.dq[..rows]).zip(head.chunks_exact(d))
                    {
                        let row = &mut learning.grads[a as usize * d..(a as usize + 1) * d];
                        for (r, &x) in row.iter_mut().zip(gb) {
                            *r += dq * x;
                        }
                    }
                }
                if heads == 1 {
                    self.scorer.add_action_grad(actions, &s.dq[..rows], dg)?;
                } else {
                    let dg_head = &mut s.dg_head[..rows * d];
                    dg_head.fill(0.0);
                    self.scorer
                        .add_action_grad(actions, &s.dq[..rows], dg_head)?;
                    heads::scatter_head(dg, dg_head, rows, d, heads, k);
                }
            }
            // Critic 1 writes the observations' gradient, critic 2's is added to it.
            let input_grads = match (&mut obs_grads, i) {
                (Some(grads), 0) => Some(&mut grads[..rows * obs_dim]),
                (Some(_), _) => Some(&mut s.d_obs[..rows * obs_dim]),
                (None, _) => None,
            };
            critic.backward(
                &mut core.critics.ws[i],
                dg,
                Some(&mut core.critics.grads[i]),
                input_grads,
            )?;
            if heads > 1 {
                heads::scale_torso(critic, &mut core.critics.grads[i], 1.0 / heads as f32);
            }
            if let (Some(grads), 1) = (&mut obs_grads, i) {
                for (g, &x) in grads.iter_mut().zip(&s.d_obs[..rows * obs_dim]) {
                    *g += x;
                }
                if heads > 1 {
                    grads.iter_mut().for_each(|g| *g /= heads as f32);
                }
            }
        }
        if !critic_loss.is_finite() {
            core.critics.grads.iter_mut().for_each(|g| g.fill(0.0));
            if let Some(learning) = &mut self.learning {
                learning.grads.fill(0.0);
            }
            return Err(Error::Diverged {
                what: "critic loss",
                value: critic_loss,
            });
        }
        core.critics.step()?;
        if let Some(TableLearning { grads, adam }) = &mut self.learning {
            self.scorer
                .update_table(|values| adam.update(values, grads))??;
            for &a in actions {
                grads[a as usize * d..(a as usize + 1) * d].fill(0.0);
            }
        }

        // Actor against the updated critics: exact expectation over all actions.
        for i in 0..2 {
            let g = core.critics.online[i].forward(obs, rows, &mut core.critics.ws[i])?;
            heads::mean_heads(g, rows, d, heads, &mut s.g[i]);
        }
        let u = core.actor.forward(obs, rows, &mut self.passes.batch)?;
        self.scorer.soft_policy_loss(
            u,
            [&s.g[0][..rows * d], &s.g[1][..rows * d]],
            alpha,
            self.masking
                .as_ref()
                .map_or(Masks::None, |m| Masks::PerRow(&m.batch[..rows])),
            &mut s.loss_rows[..rows],
            &mut s.entropy_rows[..rows],
            &mut s.du[..rows * d],
        )?;
        let actor_loss = s.loss_rows[..rows].iter().sum::<f32>() / n;
        let entropy = s.entropy_rows[..rows].iter().sum::<f32>() / n;
        if !actor_loss.is_finite() {
            return Err(Error::Diverged {
                what: "policy loss",
                value: actor_loss,
            });
        }
        for g in &mut s.du[..rows * d] {
            *g /= n;
        }
        core.actor.backward(
            &mut self.passes.batch,
            &s.du[..rows * d],
            Some(&mut core.actor_grads),
            None,
        )?;
        core.step_actor(entropy)?;
        core.finish_update()?;
        Ok(SacStats {
            critic_loss,
            actor_loss,
            alpha,
            entropy,
        })
    }

    /// Sizes the buffer [`DiscreteSac::update_transitions`] needs to return the
    /// observations' gradient (`batch_size x obs_dim` floats, in the memory plan).
    pub(crate) fn enable_obs_grads(&mut self) -> Result<()> {
        let extras = Extras {
            obs_grads: true,
            ..self.extras
        };
        self.replan(extras)?;
        self.scratch.d_obs = vec![0.0; self.core.config.batch_size * self.obs_dim];
        Ok(())
    }

    /// Elements of the observations it takes.
    pub(crate) fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    /// Whether actions are masked per state (a mask function reads raw observations).
    pub(crate) fn is_masked(&self) -> bool {
        self.masking.is_some()
    }

    /// Actions for `obs` (`rows x obs_dim`): sampled from the policy (inverse CDF over
    /// the chunks) or, in [`Mode::Deterministic`], its most likely action.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length.
    pub fn act_rows(&mut self, obs: &[f32], actions: &mut [u32]) -> Result<()> {
        DiscreteActing {
            actor: &self.core.actor,
            ws: &mut self.passes.act,
            scorer: &mut self.scorer,
            masking: self
                .masking
                .as_mut()
                .map(|m| (&*m.available, m.act.as_mut_slice())),
            rng: &mut self.core.rng,
            scores: &mut self.scratch.act_scores,
            mode: self.core.mode,
        }
        .act(obs, actions)
    }

    /// The scorer, the mask function and whether the table is learned, for
    /// [`super::DiscreteSacActor`].
    pub(super) fn acting_parts(&self) -> (&ChunkedScorer, Option<&Arc<ActionMaskFn>>, bool) {
        (
            &self.scorer,
            self.masking.as_ref().map(|m| &m.available),
            self.learning.is_some(),
        )
    }
}

/// What acting for a collector reads and writes: the actor's forward pass over at most
/// [`ACT_ROWS`] rows at a time, masks evaluated per row, sampling or the most likely
/// action from the scorer. Shared by [`DiscreteSac`] and [`super::DiscreteSacActor`],
/// so both act alike.
pub(super) struct DiscreteActing<'a> {
    pub(super) actor: &'a Mlp,
    pub(super) ws: &'a mut MlpWorkspace,
    pub(super) scorer: &'a mut ChunkedScorer,
    /// The mask function and one reused mask per acting row.
    pub(super) masking: Option<(&'a ActionMaskFn, &'a mut [ActionMask])>,
    pub(super) rng: &'a mut Xoshiro256PlusPlus,
    pub(super) scores: &'a mut [f32],
    pub(super) mode: Mode,
}

impl DiscreteActing<'_> {
    /// Actions for `obs`.
    pub(super) fn act(mut self, obs: &[f32], actions: &mut [u32]) -> Result<()> {
        let obs_dim = self.actor.input_dim();
        for (o, a) in crate::predict::action_chunks(obs, obs_dim, actions, ACT_ROWS)? {
            let m = a.len();
            let u = self.actor.forward(o, m, self.ws)?;
            let masks = match &mut self.masking {
                Some((available, masks)) => {
                    Masking::fill(*available, o, obs_dim, &mut masks[..m]);
                    Masks::PerRow(&masks[..m])
                }
                None => Masks::None,
            };
            match self.mode {
                Mode::Sample => {
                    self.scorer
                        .sample(u, masks, Sampling::InverseCdf, self.rng, a)?;
                }
                Mode::Deterministic => {
                    self.scorer.top_k(u, masks, 1, a, &mut self.scores[..m])?;
                }
            }
        }
        Ok(())
    }
}

fn check_table_rows(table: &FeatureTable, n: u32, action_space: &Space) -> Result<()> {
    if table.rows() == n as usize {
        return Ok(());
    }
    Err(Error::SpaceMismatch {
        what: "action space",
        expected: format!(
            "a discrete space of {} actions (the action table's rows)",
            table.rows()
        ),
        actual: describe(action_space),
    })
}

/// The plan line of the observations' gradient behind a summarizer (`rows x obs`
/// floats, [`DiscreteSac::enable_obs_grads`]), the last line of the learner's plan.
pub(crate) fn obs_grads_line(rows: usize, obs: usize) -> Result<(&'static str, u64)> {
    Ok((
        "sac/observation gradients (for the summarizer)",
        Sizes::of("sac.batch_size").f32s(&[rows, obs])?,
    ))
}

/// The observation length of an `f32` box with at least one element.
fn obs_dim(observation_space: &Space) -> Result<usize> {
    match observation_space {
        Space::Box(b) if b.dtype() == DType::F32 && b.flat_len() > 0 => Ok(b.flat_len()),
        other => Err(Error::SpaceMismatch {
            what: "observation space",
            expected: "a box of f32 elements".to_owned(),
            actual: describe(other),
        }),
    }
}

fn discrete_n(space: &Space) -> Result<u32> {
    match space {
        Space::Discrete { n } => Ok(*n),
        other => Err(Error::SpaceMismatch {
            what: "action space",
            expected: "a discrete space".to_owned(),
            actual: describe(other),
        }),
    }
}

impl crate::predict::Predict for DiscreteSac {
    fn mode(&self) -> Mode {
        self.core.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.core.mode = mode;
    }
}

impl crate::learner::Learner for DiscreteSac {
    type Saved = SacState;

    fn kind(&self) -> &'static str {
        CHECKPOINT_KIND
    }

    fn updates(&self) -> u64 {
        self.core.updates()
    }

    /// Also the scoring over all actions: its soft passes split the batch rows in two.
    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        self.core.set_pool(pool.as_ref());
        self.passes.set_pool(pool.as_ref());
        self.scorer.set_join(pool.map(|pool| {
            std::sync::Arc::new(super::PoolJoin(pool)) as std::sync::Arc<dyn rl_actions::Join>
        }));
    }

    /// Everything the trainer holds, constant for its life: networks, gradients,
    /// moments, workspaces, the scorer's chunk scratch (and the shared table, counted
    /// once) and per-update buffers.
    fn memory_plan(&self) -> MemoryPlan {
        self.blueprint.learner.clone()
    }

    /// The whole trainer state (as [`crate::sac::Sac::checkpoint`](crate::learner::Learner::checkpoint)), with the learned table
    /// and its optimiser (network `action_table`) when the table is learned.
    fn checkpoint(&self) -> Checkpoint<'_, SacState> {
        let mut checkpoint = self.core.checkpoint(CHECKPOINT_KIND);
        if let (Some(learning), Some(table)) = (&self.learning, self.scorer.table()) {
            let shape = vec![table.rows(), table.dim()];
            checkpoint.networks.push(NetworkState {
                name: TABLE.to_owned(),
                architecture: Architecture::Tensor {
                    shape: shape.clone(),
                },
                tensors: vec![TensorSpec {
                    name: "value".to_owned(),
                    shape,
                    offset: 0,
                }],
                params: table.as_slice().into(),
                optimizer: Some(learning.adam.state()),
            });
        }
        checkpoint
    }

    /// Restores a [`DiscreteSac::checkpoint`](crate::learner::Learner::checkpoint); everything (the learned table too) is
    /// checked first, and on error nothing changes.
    ///
    /// # Errors
    /// As [`crate::sac::Sac::restore`](crate::learner::Learner::restore), and [`Error::CheckpointMismatch`] for a checkpoint
    /// with a learned table given to a trainer without one or the reverse.
    fn restore(&mut self, checkpoint: &Checkpoint<SacState>) -> Result<()> {
        let saved = checkpoint.networks.iter().find(|n| n.name == TABLE);
        let learned = match (&self.learning, saved, self.scorer.table()) {
            (None, None, _) => None,
            (Some(learning), Some(saved), Some(table)) => {
                // Checks shape, values' count and the optimiser state on copies.
                let mut values = Parameters::filled(vec![table.rows(), table.dim()], 0.0)?;
                let mut adam = learning.adam.clone();
                saved.restore_into(&mut values, Some(&mut adam))?;
                // Saved moments, this learner's rate (it may change on resume).
                adam.set_lr(learning.adam.lr())?;
                if let Some((element, &value)) = values
                    .params()
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !v.is_finite())
                {
                    return Err(Error::CheckpointMismatch {
                        what: format!("learned table value {element}"),
                        expected: "a finite value".to_owned(),
                        actual: value.to_string(),
                    });
                }
                Some((adam, values))
            }
            _ => {
                let kind = |learned: bool| if learned { "learned" } else { "fixed" }.to_owned();
                return Err(Error::CheckpointMismatch {
                    what: "action table".to_owned(),
                    expected: kind(self.learning.is_some()),
                    actual: kind(saved.is_some()),
                });
            }
        };
        self.core.restore(checkpoint)?;
        if let (Some((adam, values)), Some(learning)) = (learned, &mut self.learning) {
            self.scorer
                .update_table(|table| table.copy_from_slice(values.params()))?;
            learning.adam = adam;
            learning.grads.fill(0.0);
        }
        Ok(())
    }
}

impl crate::learner::OffPolicyLearner for DiscreteSac {
    type Stats = SacStats;
    type Actor = DiscreteSacActor;

    /// A new actor; with a fixed table it makes the acting scorer's transposed copy
    /// (once: clones share it), with a learned table a copy of the current values.
    fn actor(&self) -> Result<DiscreteSacActor> {
        DiscreteSacActor::new(self)
    }

    /// Copies the actor's weights, and a learned table's values (a new copy when the
    /// actor's clones still hold the previous values).
    fn refresh_actor(&self, actor: &mut DiscreteSacActor) -> Result<()> {
        actor.refresh(self)
    }

    fn blueprint(&self) -> &OffPolicyBlueprint {
        &self.blueprint
    }

    fn update(&mut self, batch: &Batch) -> Result<SacStats> {
        DiscreteSac::update(self, batch)
    }
}

impl Policy for DiscreteSac {
    type Obs = f32;
    type Act = u32;
    type State = ();

    /// Writes actions only (no log-probabilities: SAC's replay does not need them).
    fn act(
        &mut self,
        obs: &[f32],
        _states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        Ok(self.act_rows(obs, out.actions)?)
    }
}
