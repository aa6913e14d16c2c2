//! Episode statistics with fixed memory.

/// A finished episode, as kept for [`EpisodeStats::drain_ended`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EndedEpisode {
    /// Undiscounted return.
    pub episode_return: f32,
    /// Steps.
    pub length: u32,
    /// The collector's environment steps (all environments) just after the step that
    /// ended it; `None` where it is not known (merged from another collector's
    /// statistics).
    pub frames: Option<u64>,
}

/// Completed-episode statistics: counts, and the returns and lengths of the most recent
/// episodes in a fixed window (no growth however long a run is). On request
/// ([`EpisodeStats::keep_ended`]) also every finished episode until it is drained, in a
/// list of fixed capacity.
#[derive(Clone, Debug)]
pub struct EpisodeStats {
    episodes: u64,
    terminated: u64,
    truncated: u64,
    returns: Vec<f32>,
    lengths: Vec<u32>,
    next: usize,
    /// Episodes the window keeps (not the vectors' capacity: a clone's may differ).
    size: usize,
    /// Finished episodes not drained yet: never more than its capacity (no growth).
    ended: Vec<EndedEpisode>,
    /// Finished episodes that found `ended` full.
    ended_dropped: u64,
}

impl EpisodeStats {
    /// Statistics keeping the last `window` episodes (at least 1).
    pub fn new(window: usize) -> Self {
        let window = window.max(1);
        Self {
            episodes: 0,
            terminated: 0,
            truncated: 0,
            returns: Vec::with_capacity(window),
            lengths: Vec::with_capacity(window),
            next: 0,
            size: window,
            ended: Vec::new(),
            ended_dropped: 0,
        }
    }

    /// Keeps up to `capacity` finished episodes (allocated here, once) for
    /// [`EpisodeStats::drain_ended`]; 0 keeps none (the default).
    pub fn keep_ended(&mut self, capacity: usize) {
        self.ended = Vec::with_capacity(capacity);
    }

    /// The finished episodes kept since the last drain, oldest first (allocates
    /// nothing).
    pub fn drain_ended(&mut self) -> std::vec::Drain<'_, EndedEpisode> {
        self.ended.drain(..)
    }

    /// Finished episodes that were not kept because the list was full (or not asked
    /// for: `keep_ended(0)`).
    pub fn ended_dropped(&self) -> u64 {
        self.ended_dropped
    }

    fn keep(&mut self, episode: EndedEpisode) {
        if self.ended.len() < self.ended.capacity() {
            self.ended.push(episode);
        } else {
            self.ended_dropped += 1;
        }
    }

    /// Records a finished episode. Allocates nothing.
    pub fn record(&mut self, episode_return: f32, length: u32, terminated: bool) {
        self.record_at(episode_return, length, terminated, None);
    }

    /// [`EpisodeStats::record`] of an episode that ended when the collector had taken
    /// `frames` environment steps.
    pub(crate) fn record_at(
        &mut self,
        episode_return: f32,
        length: u32,
        terminated: bool,
        frames: Option<u64>,
    ) {
        self.keep(EndedEpisode {
            episode_return,
            length,
            frames,
        });
        self.episodes += 1;
        if terminated {
            self.terminated += 1;
        } else {
            self.truncated += 1;
        }
        self.record_window(episode_return, length);
    }

    /// Episodes completed.
    pub fn episodes(&self) -> u64 {
        self.episodes
    }

    /// Episodes that ended in a terminal state.
    pub fn terminated(&self) -> u64 {
        self.terminated
    }

    /// Episodes cut by a time limit (an episode both terminated and truncated counts as
    /// terminated).
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    /// Mean return of the episodes in the window, or `None` before the first episode.
    pub fn mean_return(&self) -> Option<f32> {
        (!self.returns.is_empty())
            .then(|| self.returns.iter().sum::<f32>() / self.returns.len() as f32)
    }

    /// Mean length of the episodes in the window.
    pub fn mean_length(&self) -> Option<f32> {
        (!self.lengths.is_empty()).then(|| {
            self.lengths.iter().map(|&l| l as f32).sum::<f32>() / self.lengths.len() as f32
        })
    }

    /// Episodes currently in the window.
    pub fn window_len(&self) -> usize {
        self.returns.len()
    }

    /// Adds another collector's statistics (window entries are merged oldest first).
    pub fn merge(&mut self, other: &EpisodeStats) {
        self.episodes += other.episodes;
        self.terminated += other.terminated;
        self.truncated += other.truncated;
        let kept = other.window_len() as u64;
        self.ended_dropped += other.episodes.saturating_sub(kept);
        for (episode_return, length) in other.window() {
            self.record_window(episode_return, length);
            // Merged statistics (another collector's) hold only the window's episodes,
            // and not when they ended.
            self.keep(EndedEpisode {
                episode_return,
                length,
                frames: None,
            });
        }
    }

    fn record_window(&mut self, episode_return: f32, length: u32) {
        if self.returns.len() < self.size {
            self.returns.push(episode_return);
            self.lengths.push(length);
        } else {
            self.returns[self.next] = episode_return;
            self.lengths[self.next] = length;
        }
        self.next = (self.next + 1) % self.size;
    }

    /// The window's returns and lengths, oldest first.
    pub(crate) fn window(&self) -> impl Iterator<Item = (f32, u32)> + '_ {
        let start = if self.returns.len() < self.size {
            0
        } else {
            self.next
        };
        let len = self.returns.len();
        (0..len).map(move |i| {
            let j = (start + i) % len;
            (self.returns[j], self.lengths[j])
        })
    }

    pub(crate) fn set_counts(&mut self, episodes: u64, terminated: u64, truncated: u64) {
        self.episodes = episodes;
        self.terminated = terminated;
        self.truncated = truncated;
    }

    pub(crate) fn push_window(&mut self, episode_return: f32, length: u32) {
        self.record_window(episode_return, length);
    }

    /// Forgets everything (keeps the allocations).
    pub fn clear(&mut self) {
        self.ended.clear();
        self.ended_dropped = 0;
        self.episodes = 0;
        self.terminated = 0;
        self.truncated = 0;
        self.returns.clear();
        self.lengths.clear();
        self.next = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_episodes_drain_in_order_and_overflow_is_counted() {
        let mut stats = EpisodeStats::new(2);
        stats.record(1.0, 1, true);
        assert_eq!(stats.drain_ended().count(), 0);
        assert_eq!(stats.ended_dropped(), 1);
        stats.keep_ended(2);
        stats.record_at(2.0, 2, true, Some(10));
        stats.record(3.0, 3, false);
        stats.record(4.0, 4, false);
        let drained: Vec<EndedEpisode> = stats.drain_ended().collect();
        assert_eq!(
            drained,
            vec![
                EndedEpisode {
                    episode_return: 2.0,
                    length: 2,
                    frames: Some(10)
                },
                EndedEpisode {
                    episode_return: 3.0,
                    length: 3,
                    frames: None
                },
            ]
        );
        assert_eq!(stats.ended_dropped(), 2);
        // Drained: room again, without a new allocation.
        stats.record(5.0, 5, true);
        assert_eq!(
            stats.drain_ended().map(|e| e.length).collect::<Vec<_>>(),
            vec![5]
        );
        assert_eq!(stats.episodes(), 5);
    }

    #[test]
    fn window_keeps_the_most_recent_episodes() {
        let mut stats = EpisodeStats::new(3);
        assert_eq!(stats.mean_return(), None);
        for r in 1..=5 {
            stats.record(r as f32, r, r % 2 == 0);
        }
        assert_eq!(stats.episodes(), 5);
        assert_eq!(stats.terminated(), 2);
        assert_eq!(stats.truncated(), 3);
        assert_eq!(stats.mean_return(), Some(4.0)); // 3, 4, 5
        assert_eq!(stats.window_len(), 3);
        let mut total = EpisodeStats::new(3);
        total.merge(&stats);
        assert_eq!(total.mean_return(), Some(4.0));
        assert_eq!(total.episodes(), 5);
    }
}
