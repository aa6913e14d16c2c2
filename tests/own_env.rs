//! The "train on your own environment" example runs in CI: it trains the corridor to its
//! goal into a run directory, which `rl eval` over the example's registry reads back.

#[allow(dead_code, reason = "the example's main is not called here")]
#[path = "../examples/own_env.rs"]
mod example;

use rl::cli::{TrainOptions, Which};

#[test]
fn the_own_env_example_trains_to_its_goal_and_evaluates() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("corridor");
    let trained = example::train(&dir, &TrainOptions::quiet()).unwrap();
    assert!(trained.result.solved, "{:?}", trained.result);
    assert!(dir.join("metrics.jsonl").is_file() && dir.join("checkpoint").is_dir());
    let evaluated = rl::cli::eval(&example::registry(), &dir, Which::Latest, 5, None).unwrap();
    assert_eq!(evaluated.report.mean_return, 1.0, "{:?}", evaluated.report);
    assert!(evaluated.report.max_length <= 32);
}
