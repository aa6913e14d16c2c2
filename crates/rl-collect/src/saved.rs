//! What a collector saves so that a restarted run continues its episodes: the episode
//! statistics always, and (where every environment can save its state and the policy
//! keeps none per environment) the environments, their current observations and
//! unfinished episodes, and the warm-up's random stream.

use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::Env;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lanes::Lanes;
use crate::stats::EpisodeStats;

/// [`EpisodeStats`] as saved data: the counts, and the window's episodes oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedStats {
    episodes: u64,
    terminated: u64,
    truncated: u64,
    returns: Vec<f32>,
    lengths: Vec<u32>,
}

impl EpisodeStats {
    /// The statistics as saved data.
    pub fn saved(&self) -> SavedStats {
        let (returns, lengths) = self.window().unzip();
        SavedStats {
            episodes: self.episodes(),
            terminated: self.terminated(),
            truncated: self.truncated(),
            returns,
            lengths,
        }
    }

    /// Replaces the statistics with saved ones, keeping this window's size (its newest
    /// episodes when the saved window was longer). Changes nothing on error.
    ///
    /// # Errors
    /// [`Error::Config`] for saved statistics that disagree with themselves (damaged).
    pub fn restore(&mut self, saved: &SavedStats) -> Result<()> {
        saved.check()?;
        self.clear();
        self.set_counts(saved.episodes, saved.terminated, saved.truncated);
        for (&r, &l) in saved.returns.iter().zip(&saved.lengths) {
            self.push_window(r, l);
        }
        Ok(())
    }
}

impl SavedStats {
    /// Checks that the saved statistics agree with themselves.
    ///
    /// # Errors
    /// [`Error::Config`] where they do not (damaged data).
    pub fn check(&self) -> Result<()> {
        let saved = self;
        let consistent = saved.returns.len() == saved.lengths.len()
            && saved.terminated.checked_add(saved.truncated) == Some(saved.episodes)
            && saved.returns.len() as u64 <= saved.episodes;
        if !consistent {
            return Err(Error::config(
                "saved episode statistics",
                "disagree with themselves (the counts or the window's lengths differ): the file is damaged",
            ));
        }
        Ok(())
    }
}

/// The environments of a collector mid-episode: each one's saved state, the current
/// observations (bytes of the observation type), and the unfinished episodes' returns
/// and lengths.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedLanes {
    envs: Vec<Vec<u8>>,
    obs: Vec<u8>,
    returns: Vec<f64>,
    lengths: Vec<u32>,
}

impl<E: Env> Lanes<E> {
    /// `None` where an environment cannot save its state.
    pub(crate) fn saved(&self) -> Option<SavedLanes> {
        let envs = self
            .envs
            .iter()
            .map(Env::save_state)
            .collect::<Option<Vec<_>>>()?;
        Some(SavedLanes {
            envs,
            obs: bytemuck::cast_slice(&self.obs).to_vec(),
            returns: self.returns.clone(),
            lengths: self.lengths.clone(),
        })
    }

    /// Restores saved lanes; on error every environment is as before.
    pub(crate) fn restore(&mut self, saved: &SavedLanes) -> Result<()> {
        let n = self.len();
        let obs_bytes = self.obs.len() * size_of::<E::Obs>();
        if saved.envs.len() != n
            || saved.returns.len() != n
            || saved.lengths.len() != n
            || saved.obs.len() != obs_bytes
        {
            return Err(Error::config(
                "saved environments",
                format!(
                    "hold {} environments and {} observation bytes, but this collector has {n} and {obs_bytes}: restore into a collector built as the saved one",
                    saved.envs.len(),
                    saved.obs.len()
                ),
            ));
        }
        let before: Vec<Option<Vec<u8>>> = self.envs.iter().map(Env::save_state).collect();
        for (i, state) in saved.envs.iter().enumerate() {
            if let Err(source) = self.envs[i].restore_state(state) {
                for (env, prior) in self.envs.iter_mut().zip(&before).take(i) {
                    if let Some(prior) = prior {
                        // It saved this state a moment ago, so it takes it back.
                        let _ = env.restore_state(prior);
                    }
                }
                return Err(Error::Env {
                    env: i,
                    step: 0,
                    source,
                });
            }
        }
        bytemuck::cast_slice_mut::<E::Obs, u8>(&mut self.obs).copy_from_slice(&saved.obs);
        self.returns.copy_from_slice(&saved.returns);
        self.lengths.copy_from_slice(&saved.lengths);
        Ok(())
    }
}

/// What a [`SyncCollector`](crate::SyncCollector) saves: its episode statistics and, where every environment
/// can save its state and the policy keeps no state per environment (not a recurrent
/// one), the environments mid-episode and the warm-up's random stream, so that a
/// restored collector steps exactly as the saved one would have.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedCollector {
    /// The episode statistics.
    pub stats: SavedStats,
    /// The environments mid-episode (`None`: they could not be saved; a restored
    /// collector starts new episodes).
    pub lanes: Option<SavedLanes>,
    /// The random-action stream of the warm-up (with `lanes`).
    pub(crate) random: Option<Xoshiro256PlusPlus>,
}

impl SavedCollector {
    /// Episode statistics alone (a collector whose environments cannot be saved: an
    /// asynchronous one, or chunks from other processes).
    pub fn stats_only(stats: SavedStats) -> Self {
        Self {
            stats,
            lanes: None,
            random: None,
        }
    }
}
