//! A partially observed [`LargeDiscrete`]: the context is revealed a block per step, and
//! only the last step pays, so only a policy that remembers can score well.

use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::env::{check_len, discrete_action};
use rl_core::{BoxSpace, DType, Env, Error, FeatureTable, MemoryPlan, Result, Space, Step};

use crate::Phase;
use crate::large_discrete::{CONTEXT_DIM, Context, Estimate, LargeDiscrete};

/// [`LargeDiscrete`]'s task (100 000 actions with features `f_i`, a hidden `W`, reward
/// `<W c, f_a> + N(0, 0.1^2)` for a context `c ~ N(0, I_16)`) seen through a keyhole:
///
/// - An episode lasts `parts` steps (default 4; `parts` divides 16). At step `k` the
///   observation shows block `k` of the context (elements `k * 16 / parts ..`), zeros
///   elsewhere, followed by a one-hot of `k` (`parts` elements): `16 + parts` floats.
/// - Steps before the last pay 0 whatever the action; the last step pays the task's
///   reward for the whole context and terminates.
///
/// A policy that remembers the blocks earns the full task's optimum
/// ([`PartialLargeDiscrete::optimal_reward`]). A memoryless policy sees only the last
/// block when it is paid, so the best it can do is to maximise `<W c, f_i>` with the
/// unseen blocks at their mean, zero ([`PartialLargeDiscrete::memoryless_optimal_reward`]).
/// For 100 000 actions, task seed 0 and 4 parts (20 000 Monte Carlo contexts): 3.757 ±
/// 0.008 with memory, 1.961 ± 0.012 without. The gap, 1.80 per episode, is what history
/// is worth here.
#[derive(Clone, Debug)]
pub struct PartialLargeDiscrete {
    task: LargeDiscrete,
    parts: usize,
    context: [f32; CONTEXT_DIM],
    step: usize,
    phase: Phase,
    rng: Xoshiro256PlusPlus,
    observation_space: Space,
}

impl PartialLargeDiscrete {
    /// Default number of blocks the context is revealed in.
    pub const DEFAULT_PARTS: usize = 4;

    /// The task of [`LargeDiscrete::new`] revealed in 4 blocks.
    pub fn new(task_seed: u64) -> Self {
        match Self::with_task(
            LargeDiscrete::new(task_seed),
            Self::DEFAULT_PARTS,
            task_seed,
        ) {
            Ok(env) => env,
            Err(_) => unreachable!("4 divides the context length"),
        }
    }

    /// `task` revealed in `parts` blocks; `episode_seed` seeds the contexts and noise.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `parts` is 0 or does not divide 16.
    pub fn with_task(task: LargeDiscrete, parts: usize, episode_seed: u64) -> Result<Self> {
        if parts == 0 || !CONTEXT_DIM.is_multiple_of(parts) {
            return Err(Error::config(
                "parts",
                format!(
                    "is {parts}: use a divisor of the context length {CONTEXT_DIM} (1, 2, 4, 8 or 16)"
                ),
            ));
        }
        let observation_space = Space::Box(BoxSpace::uniform(
            f32::NEG_INFINITY,
            f32::INFINITY,
            &[CONTEXT_DIM + parts],
            DType::F32,
        )?);
        Ok(Self {
            task,
            parts,
            context: [0.0; CONTEXT_DIM],
            step: 0,
            phase: Phase::NotStarted,
            rng: Xoshiro256PlusPlus::seed_from_u64(episode_seed ^ 0x005E_ED0F_B10C),
            observation_space,
        })
    }

    /// Steps per episode.
    pub fn parts(&self) -> usize {
        self.parts
    }

    /// Number of actions.
    pub fn actions(&self) -> u32 {
        self.task.actions()
    }

    /// The `n x 8` action feature table (shared, as [`LargeDiscrete::action_features`]).
    pub fn action_features(&self) -> &FeatureTable {
        self.task.action_features()
    }

    /// The environment's own memory: the feature table, held once.
    pub fn memory_plan(&self) -> MemoryPlan {
        self.task.memory_plan()
    }

    /// The underlying fully observed task.
    pub fn task(&self) -> &LargeDiscrete {
        &self.task
    }

    /// The context of the current episode (for tests and diagnostics).
    pub fn context(&self) -> &[f32] {
        &self.context
    }

    /// The expected return of a policy that remembers every block: the full task's
    /// optimum, [`LargeDiscrete::optimal_reward`].
    pub fn optimal_reward(&self, samples: usize, seed: u64) -> Estimate {
        self.task.optimal_reward(samples, seed)
    }

    /// Monte Carlo estimate of the best expected return without memory: at the paid step
    /// only the last block is seen, the others are independent with mean zero, so the
    /// best action maximises `<W c_last, f_i>` with the other blocks set to zero, and
    /// earns the full context's reward for that action. Costs `samples x n x 8`
    /// multiply-adds.
    pub fn memoryless_optimal_reward(&self, samples: usize, seed: u64) -> Estimate {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let block = CONTEXT_DIM / self.parts;
        let last = CONTEXT_DIM - block..CONTEXT_DIM;
        let mut context = [0.0f32; CONTEXT_DIM];
        let mut visible = [0.0f32; CONTEXT_DIM];
        let (mut sum, mut sum_sq) = (0.0f64, 0.0f64);
        for _ in 0..samples {
            for c in &mut context {
                *c = rng.sample(StandardNormal);
            }
            visible[last.clone()].copy_from_slice(&context[last.clone()]);
            // `best_action` and `mean_reward` cannot fail on contexts of the right length.
            let reward = self
                .task
                .best_action(&visible)
                .and_then(|(action, _)| self.task.mean_reward(&context, action))
                .map_or(0.0, f64::from);
            sum += reward;
            sum_sq += reward * reward;
        }
        let n = samples.max(1) as f64;
        let mean = sum / n;
        Estimate {
            mean,
            std_error: ((sum_sq / n - mean * mean).max(0.0) / n).sqrt(),
            samples,
        }
    }

    /// Writes the observation of step `self.step`.
    fn observe(&self, obs: &mut [f32]) {
        let block = CONTEXT_DIM / self.parts;
        let shown = self.step * block..(self.step + 1) * block;
        obs.fill(0.0);
        obs[shown.clone()].copy_from_slice(&self.context[shown]);
        obs[CONTEXT_DIM + self.step] = 1.0;
    }
}

impl Env for PartialLargeDiscrete {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        self.task.action_space()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        check_len("observation buffer", CONTEXT_DIM + self.parts, obs.len())?;
        if let Some(seed) = seed {
            self.rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        }
        for c in &mut self.context {
            *c = self.rng.sample(StandardNormal);
        }
        self.step = 0;
        self.phase = Phase::Running;
        self.observe(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> Result<Step> {
        check_len("observation buffer", CONTEXT_DIM + self.parts, obs.len())?;
        let index = discrete_action(action, self.actions())?;
        self.phase.check_running()?;
        if self.step + 1 < self.parts {
            self.step += 1;
            self.observe(obs);
            return Ok(Step {
                reward: 0.0,
                terminated: false,
                truncated: false,
            });
        }
        let noise: f32 = self.rng.sample(StandardNormal);
        let reward =
            self.task.mean_reward(&self.context, index)? + LargeDiscrete::NOISE_STD * noise;
        self.phase = Phase::Ended;
        // The final observation repeats the last one.
        self.observe(obs);
        Ok(Step {
            reward,
            terminated: true,
            truncated: false,
        })
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        crate::save_state(
            "PartialLargeDiscrete",
            Context {
                context: self.context.to_vec(),
                step: self.step,
                phase: self.phase,
                rng: self.rng.clone(),
            },
        )
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        let saved = Context::load("PartialLargeDiscrete", state, self.parts)?;
        self.context.copy_from_slice(&saved.context);
        self.step = saved.step;
        self.phase = saved.phase;
        self.rng = saved.rng;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
