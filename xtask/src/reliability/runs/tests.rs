use super::*;

#[test]
fn the_line_has_exactly_the_contract_keys() {
    let tally = RunsTally {
        kills: 20,
        resumed: 20,
        lost_minutes_max: 0.0412,
        ..RunsTally::default()
    };
    assert_eq!(
        tally.json(),
        r#"{"bench":"crash-runs","kills":20,"resumed":20,"broken_run_dirs":0,"metrics_non_monotone":0,"lost_minutes_max":0.041}"#
    );
    let line: serde_json::Value = serde_json::from_str(&tally.json()).expect("JSON");
    assert_eq!(line["resumed"], 20);
    assert!(tally.clean());
}

#[test]
fn a_kill_not_resumed_a_broken_dir_or_bad_metrics_fail() {
    let clean = RunsTally {
        kills: 10,
        resumed: 10,
        ..RunsTally::default()
    };
    assert!(clean.clean());
    let not_resumed = RunsTally {
        resumed: 9,
        ..clean
    };
    assert!(!not_resumed.clean());
    let broken = RunsTally {
        kills: 10,
        resumed: 10,
        broken_run_dirs: 1,
        ..RunsTally::default()
    };
    assert!(!broken.clean());
    let non_monotone = RunsTally {
        kills: 10,
        resumed: 10,
        metrics_non_monotone: 1,
        ..RunsTally::default()
    };
    assert!(!non_monotone.clean());
}

#[test]
fn metrics_going_forward_or_staying_pass() {
    let text = "{\"env_steps\":0,\"x\":1}\n{\"env_steps\":1000}\n{\"env_steps\":1000}\n\
                {\"env_steps\":2048,\"return_mean\":null}\n";
    assert_eq!(metrics_problem(text), None);
    assert_eq!(metrics_problem(""), None);
    assert_eq!(metrics_problem("{\"env_steps\":5}\n\n"), None);
}

#[test]
fn metrics_going_back_or_torn_fail() {
    let back = "{\"env_steps\":1000}\n{\"env_steps\":2000}\n{\"env_steps\":1500}\n";
    let problem = metrics_problem(back).expect("goes back");
    assert!(
        problem.contains("line 3") && problem.contains("2000 to 1500"),
        "{problem}"
    );
    let torn = "{\"env_steps\":1000}\n{\"env_ste";
    assert!(metrics_problem(torn).expect("torn").contains("line 2"));
    let no_steps = "{\"env_steps\":1000}\n{\"updates\":3}\n";
    assert!(metrics_problem(no_steps).is_some());
    assert!(metrics_problem("[1,2]\n").is_some());
}

#[test]
fn a_result_at_the_budget_or_the_goal_passes() {
    let result = |steps: u64, by: &str| {
        format!("{{\"solved\":false,\"total_env_steps\":{steps},\"stopped_by\":\"{by}\"}}\n")
    };
    assert_eq!(final_problem(&result(8192, "budget"), 8192), None);
    assert_eq!(final_problem(&result(4096, "goal"), 8192), None);
    let short = final_problem(&result(4096, "budget"), 8192).expect("short");
    assert!(short.contains("4096") && short.contains("8192"), "{short}");
    assert!(final_problem(&result(8192, "interrupted"), 8192).is_some());
    assert!(final_problem("{\"total_env_steps\":8192}", 8192).is_some());
    assert!(final_problem("{\"total_env_", 8192).is_some());
}

#[test]
fn moments_cover_start_up_mid_run_and_saves() {
    let mut random = Random(7);
    let moments: Vec<Moment> = (0..300).map(|_| Moment::draw(&mut random)).collect();
    let startup = moments
        .iter()
        .filter(|m| matches!(m, Moment::Startup { after_ms } if (50..500).contains(after_ms)))
        .count();
    let anytime = moments
        .iter()
        .filter(|m| matches!(m, Moment::Anytime { after_ms } if (500..3000).contains(after_ms)))
        .count();
    let save = moments
        .iter()
        .filter(|m| matches!(m, Moment::Save { after_us } if *after_us < 20_000))
        .count();
    assert_eq!(startup + anytime + save, 300);
    assert!(
        startup > 50 && anytime > 50 && save > 50,
        "{startup} {anytime} {save}"
    );
    let mut again = Random(7);
    assert_eq!(Moment::draw(&mut again), moments[0], "seeded");
}

#[test]
fn every_shipped_config_exists() {
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    for shipped in SHIPPED {
        assert!(configs.join(shipped.file).is_file(), "{}", shipped.file);
        assert_eq!(
            shipped.total_steps % shipped.every_steps,
            0,
            "{}",
            shipped.file
        );
    }
}
