//! One episode of 1,000,000 steps through the LSTM summarizer for 4 environments: after
//! warm-up a step allocates nothing and resident memory stays flat. This binary holds
//! this one test, so that no other test's allocations move the resident set it reads.
#![allow(clippy::unwrap_used, reason = "tests")]

use rand::SeedableRng;
use rl_core::ProcessMemory;
use rl_history::{Lstm, Summarizer};

#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;

#[test]
fn a_million_step_episode_allocates_nothing_and_stays_flat() {
    const ENVS: usize = 4;
    const STEPS: usize = 1_000_000;
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
    let lstm = Lstm::new(4, 8, &mut rng).unwrap();
    let mut state = lstm.state(ENVS);
    let mut out = vec![0.0f32; ENVS * lstm.output_len()];
    let mut obs = [0.0f32; ENVS * 4];
    let mut starts = [true; ENVS];
    let mut step = |t: usize, state: &mut _, out: &mut [f32]| {
        for (i, o) in obs.iter_mut().enumerate() {
            // A cheap observation stream that does not settle.
            *o = ((t * 7 + i * 13) % 101) as f32 / 50.0 - 1.0;
        }
        lstm.step(state, &obs, &starts, out).unwrap();
        starts = [false; ENVS];
    };
    for t in 0..1000 {
        step(t, &mut state, &mut out);
    }
    let before = ProcessMemory::read().unwrap();
    let ((), stats) = rl_testkit::measure(|| {
        for t in 1000..STEPS {
            step(t, &mut state, &mut out);
        }
    });
    let after = ProcessMemory::read().unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
    assert_eq!(stats.allocated_bytes, 0, "{stats:?}");
    let growth = after.rss_bytes.saturating_sub(before.rss_bytes);
    assert!(
        growth <= 1 << 20,
        "resident memory grew by {growth} bytes over {STEPS} steps"
    );
    assert!(out.iter().all(|v| v.is_finite() && v.abs() < 1.0));
    // The state is still h and c for 4 environments: 2 x 4 x 8 floats, plus gates.
    assert_eq!(lstm.state_bytes(ENVS), (ENVS * 6 * 8 * 4) as u64);
}
