use super::*;

const PPO: &str = r#"
algo = "ppo"
env = "cartpole"
[run]
total_steps = 1000
n_envs = 4
[ppo]
n_steps = 32
adam = { lr = 2e-3 }
"#;

fn error(text: &str, overrides: &[&str]) -> ConfigError {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Config::from_toml(text, &overrides).expect_err("the config should be refused")
}

#[test]
fn missing_keys_take_the_algorithms_defaults_also_in_nested_tables() {
    let config = Config::from_toml(PPO, &[]).unwrap();
    let ppo = config.ppo.unwrap();
    assert_eq!(ppo.n_steps, 32);
    assert_eq!(ppo.adam.lr, 2e-3);
    // PPO's own Adam epsilon, not AdamConfig::default()'s by accident of equality:
    assert_eq!(ppo.adam.eps, PpoConfig::new().adam.eps);
    assert_eq!(ppo.epochs, PpoConfig::new().epochs);
    assert_eq!(config.policy, Some(PolicyConfig::new()));
    assert!(config.sac.is_none() && config.off_policy.is_none());

    let sac = Config::from_toml(
        "algo = \"sac\"\nenv = \"pendulum\"\n[run]\ntotal_steps = 10\n[sac.adam]\nlr = 1e-3\n",
        &[],
    )
    .unwrap()
    .sac
    .unwrap();
    assert_eq!(sac.adam.lr, 1e-3);
    assert_eq!(
        sac.adam.eps, 1e-8,
        "SAC's epsilon survives a partial [sac.adam]"
    );
    assert_eq!(sac.hidden, vec![256, 256]);

    // Beside a key whose default is off (None), and inline.
    let sac = Config::from_toml(
        "algo = \"discrete_sac\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 10\n[sac]\ntarget_entropy = 0.5\nadam = { lr = 1e-3 }\nent_coef = { auto = {} }\n",
        &[],
    )
    .unwrap()
    .sac
    .unwrap();
    assert_eq!((sac.adam.lr, sac.adam.eps), (1e-3, 1e-8));
    assert_eq!(sac.target_entropy, Some(0.5));
    assert_eq!(
        sac.ent_coef,
        rl_algos::sac::EntropyCoef::Auto { initial: 1.0 }
    );

    // Another enum variant replaces the default one whole.
    let dqn = Config::from_toml(
        "algo = \"dqn\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 10\n[dqn]\ntarget_update = { polyak = { tau = 0.01 } }\n",
        &[],
    )
    .unwrap()
    .dqn
    .unwrap();
    assert_eq!(
        dqn.target_update,
        rl_algos::dqn::TargetUpdate::Polyak { tau: 0.01 }
    );
}

#[test]
fn the_dqn_ensemble_key_parses_and_a_set_changes_one_field() {
    let text = "algo = \"dqn\"\nenv = \"deep_sea\"\n[run]\ntotal_steps = 10\n[dqn]\nensemble = { heads = 10, mask_probability = 0.5 }\n";
    let dqn = Config::from_toml(text, &[]).unwrap().dqn.unwrap();
    let ensemble = dqn.ensemble.unwrap();
    assert_eq!((ensemble.heads, ensemble.mask_probability), (10, 0.5));
    assert_eq!(ensemble.prior_scale, 0.0);
    let dqn = Config::from_toml(text, &["dqn.ensemble.prior_scale=3.0".to_owned()])
        .unwrap()
        .dqn
        .unwrap();
    assert_eq!(dqn.ensemble.unwrap().prior_scale, 3.0);
    let bad = "algo = \"dqn\"\nenv = \"deep_sea\"\n[run]\ntotal_steps = 10\n[dqn]\nensemble = { heads = 0, mask_probability = 0.5 }\n";
    assert!(Config::from_toml(bad, &[]).is_err());
}

#[test]
fn the_effective_config_reads_back_as_the_same_config() {
    for text in [
        PPO,
        "algo = \"dqn\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 10\nseed = 3\n[run.goal.eval_return]\nmean_return = 475.0\n[run.eval]\nevery_steps = 100\nepisodes = 2\n[off_policy]\nprioritized = {}\ncollector = { async = { workers = 1, steps_per_chunk = 8 } }\n",
        "algo = \"recurrent_ppo\"\nenv = \"masked_cartpole\"\n[run]\ntotal_steps = 10\nn_envs = 2\n[ppo]\nn_steps = 64\nbatch_size = 128\n[recurrent]\nhistory = { stack = { k = 4 } }\n",
        "algo = \"discrete_sac\"\nenv = \"large_discrete\"\nstored_actions = \"one_hot\"\n[run]\ntotal_steps = 10\n[run.budget]\nram = 1073741824\n[sac]\nent_coef = { fixed = 0.1 }\ntarget_entropy = 6.9\n",
    ] {
        let config = Config::from_toml(text, &[]).unwrap();
        let written = config.to_toml().unwrap();
        let again = Config::from_toml(&written, &[]).unwrap();
        assert_eq!(again, config, "{written}");
        assert!(!written.contains("seed = 0\n[") || written.contains("[run]"));
    }
}

#[test]
fn the_run_seed_is_the_only_seed_and_no_algorithm_table_takes_one() {
    let config = Config::from_toml(PPO, &["run.seed=7".into()]).unwrap();
    assert_eq!(config.run.seed, 7);
    for (text, key) in [
        (PPO, "ppo.seed"),
        (
            "algo = \"sac\"\nenv = \"pendulum\"\n[run]\ntotal_steps = 10\n[sac]\nseed = 3\n",
            "sac.seed",
        ),
        (
            "algo = \"dqn\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 10\n",
            "dqn.seed",
        ),
    ] {
        let e = error(text, &[&format!("{key}=7")]);
        assert_eq!(e.key, key);
        assert!(e.message.starts_with(&format!("{key}: ")), "{e}");
        assert!(e.message.contains("use run.seed"), "{e}");
    }
}

#[test]
fn overrides_parse_toml_values_or_bare_strings() {
    let config = Config::from_toml(
        PPO,
        &[
            "ppo.n_steps=64".into(),
            "env=pendulum".into(),
            "run.goal={training_return={mean_return=-500.0, window=20}}".into(),
            "policy.hidden=[32, 32]".into(),
        ],
    )
    .unwrap();
    assert_eq!(config.ppo.unwrap().n_steps, 64);
    assert_eq!(config.env, "pendulum");
    assert_eq!(config.policy.unwrap().hidden, vec![32, 32]);
    assert!(config.run.goal.is_some());
    assert_eq!(error(PPO, &["ppo.n_steps"]).key, "--set");
    assert_eq!(error(PPO, &["algo.x=1"]).key, "algo");
}

#[test]
fn errors_name_the_key_the_value_and_what_is_allowed_on_one_line() {
    let cases: [(&str, &[&str], &str, &[&str]); 8] = [
        (
            PPO,
            &["ppo.adam.lrr=3"],
            "ppo.adam.lrr",
            &["unknown field", "lr"],
        ),
        (
            PPO,
            &["ppo.n_stepz=3"],
            "ppo.n_stepz",
            &["unknown field", "n_steps"],
        ),
        (
            PPO,
            &["ppo.n_steps=\"many\""],
            "ppo.n_steps",
            &["\"many\"", "usize"],
        ),
        (PPO, &["algo=ppx"], "algo", &["ppx", "recurrent_ppo", "dqn"]),
        (
            PPO,
            &["ppo.batch_size=1000"],
            "ppo.batch_size",
            &["1000", "at most 128"],
        ),
        (PPO, &["sac.batch_size=10"], "sac", &["[ppo], [policy]"]),
        (
            PPO,
            &["stored_actions=one_hot"],
            "stored_actions",
            &["one_hot"],
        ),
        (
            PPO,
            &["run.checkpoint.dir=x"],
            "run.checkpoint.dir",
            &["--out"],
        ),
    ];
    for (text, overrides, key, words) in cases {
        let e = error(text, overrides);
        assert_eq!(e.key, key, "{e}");
        assert!(!e.message.contains('\n'), "{e}");
        for word in words {
            assert!(e.message.contains(word), "{e:?} lacks {word}");
        }
    }
    let e = error("algo = \"ppo\"\nenv = \"cartpole\"\n[run\n", &[]);
    assert!(e.message.starts_with("line 3"), "{e}");
    assert!(!e.message.contains('\n'));
    assert_eq!(error("env = \"cartpole\"", &[]).key, "algo");
    assert_eq!(
        error(
            "algo = \"dqn\"\nenv = \"x\"\n[run]\ntotal_steps = 1\n[off_policy]\ntrain_freq = 0\n",
            &[]
        )
        .key,
        "off_policy.train_freq"
    );
}

#[test]
fn configs_that_would_not_do_what_they_say_get_warnings() {
    let config = |text: &str, overrides: &[&str]| {
        let overrides: Vec<String> = overrides.iter().map(|s| (*s).to_owned()).collect();
        Config::from_toml(text, &overrides).unwrap()
    };
    let dqn = "algo = \"dqn\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 5000\n";
    assert!(
        config(dqn, &["off_policy.learning_starts=4999"])
            .warnings()
            .is_empty()
    );
    for starts in ["5000", "9000"] {
        let warnings = config(dqn, &[&format!("off_policy.learning_starts={starts}")]).warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("off_policy.learning_starts")
                && warnings[0].contains("never updates")
        );
    }
    let ppo = "algo = \"ppo\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 512\nn_envs = 4\n";
    assert!(config(ppo, &["ppo.n_steps=128"]).warnings().is_empty());
    let warnings = config(ppo, &["ppo.n_steps=2048"]).warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("8192"), "{}", warnings[0]);
    let recurrent = "algo = \"recurrent_ppo\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 10\n";
    assert_eq!(config(recurrent, &[]).warnings().len(), 1);
}

const SEQUENCE: &str = "algo = \"discrete_sac\"\nenv = \"partial_large_discrete\"\n[run]\ntotal_steps = 10\n[sac]\nbatch_size = 64\nensemble = { heads = 4, mask_probability = 0.5 }\n[sequence]\nseq_len = 4\nadam = { lr = 1e-3 }\n";

#[test]
fn the_sequence_table_takes_recurrent_config_defaults_and_reads_back() {
    let config = Config::from_toml(SEQUENCE, &[]).unwrap();
    let sequence = config.sequence.clone().unwrap();
    let defaults = RecurrentConfig::default();
    assert_eq!(sequence.seq_len, 4);
    assert_eq!(sequence.history, defaults.history);
    assert_eq!(sequence.adam.lr, 1e-3);
    // A partial [sequence.adam] keeps the summarizer's other Adam values.
    assert_eq!(sequence.adam.eps, defaults.adam.eps);
    assert_eq!(config.sac.as_ref().unwrap().ensemble.unwrap().heads, 4);
    let written = config.to_toml().unwrap();
    assert_eq!(
        Config::from_toml(&written, &[]).unwrap(),
        config,
        "{written}"
    );
    // Without the table the learner has no memory.
    let plain = Config::new(Algo::Dqn, "cartpole", 10).unwrap();
    assert!(plain.sequence.is_none());
    let dqn = "algo = \"dqn\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 10\n[dqn]\nbatch_size = 32\n[sequence]\nhistory = { stack = { k = 4 } }\n";
    let config = Config::from_toml(dqn, &[]).unwrap();
    assert_eq!(config.sequence.unwrap().history, History::Stack { k: 4 });
}

#[test]
fn bad_sequence_and_critic_head_settings_name_their_keys() {
    let cases: [(&str, &[&str], &str, &[&str]); 7] = [
        (
            SEQUENCE,
            &["sequence.seq_len=0"],
            "sequence.seq_len",
            &["is 0"],
        ),
        (SEQUENCE, &["sequence.tau=2.0"], "sequence.tau", &["(0, 1]"]),
        (
            SEQUENCE,
            &["sequence.seq_len=5"],
            "sac.batch_size",
            &["64", "multiple", "sequence.seq_len 5"],
        ),
        (
            SEQUENCE,
            &["sequence.lenght=5"],
            "sequence.lenght",
            &["unknown field"],
        ),
        (
            SEQUENCE,
            &["sac.ensemble.prior_scale=3.0"],
            "sac.ensemble.prior_scale",
            &["no prior"],
        ),
        (
            SEQUENCE,
            &["sac.ensemble.heads=65"],
            "sac.ensemble.heads",
            &["1 to 64"],
        ),
        // Continuous SAC has no critic heads; PPO reads no [sequence].
        (
            "algo = \"sac\"\nenv = \"pendulum\"\n[run]\ntotal_steps = 10\n[sac]\nensemble = { heads = 4, mask_probability = 0.5 }\n",
            &[],
            "sac.ensemble",
            &["continuous SAC", "discrete_sac"],
        ),
    ];
    for (text, overrides, key, words) in cases {
        let e = error(text, overrides);
        assert_eq!(e.key, key, "{}", e.message);
        assert!(e.message.starts_with(key), "{}", e.message);
        for word in words {
            assert!(e.message.contains(word), "{word:?} missing: {}", e.message);
        }
    }
    let e = error(PPO, &["sequence.seq_len=4"]);
    assert_eq!(e.key, "sequence", "{}", e.message);
    let e = error(
        "algo = \"dqn\"\nenv = \"catch\"\n[run]\ntotal_steps = 10\n[dqn]\nencoder = \"small_cnn\"\nbatch_size = 32\n[sequence]\n",
        &[],
    );
    assert_eq!(e.key, "dqn.encoder", "{}", e.message);
}

#[test]
fn env_kwargs_parse_read_back_and_take_overrides() {
    let text = format!(
        "{PPO}\n[env_kwargs]\nctrl_cost_weight = 0.1\nframes = 3\nterminate = false\nmode = \"rgb\"\nrange = [0.7, 100.0]\n"
    );
    let config = Config::from_toml(&text, &["env_kwargs.frames=5".into()]).unwrap();
    let kwargs = &config.env_kwargs;
    assert_eq!(kwargs["ctrl_cost_weight"], EnvKwarg::Float(0.1));
    assert_eq!(kwargs["frames"], EnvKwarg::Int(5));
    assert_eq!(kwargs["terminate"], EnvKwarg::Bool(false));
    assert_eq!(kwargs["mode"], EnvKwarg::String("rgb".into()));
    assert_eq!(
        kwargs["range"],
        EnvKwarg::Array(vec![EnvKwarg::Float(0.7), EnvKwarg::Float(100.0)])
    );
    // The effective config (a run's config.toml) reads back the same, floats as floats.
    let again = Config::from_toml(&config.to_toml().unwrap(), &[]).unwrap();
    assert_eq!(again, config);
    // Without any, none are written.
    let plain = Config::from_toml(PPO, &[]).unwrap();
    assert!(plain.env_kwargs.is_empty() && !plain.to_toml().unwrap().contains("env_kwargs"));
}

#[test]
fn bad_env_kwargs_name_their_key() {
    let e = error(PPO, &["env_kwargs.2fast=1"]);
    assert_eq!(e.key, "env_kwargs.2fast", "{e}");
    let e = error(PPO, &["env_kwargs.nested={a=1}"]);
    assert!(e.key.starts_with("env_kwargs"), "{e}");
}

#[test]
fn the_atari_table_keeps_defaults_and_refuses_unknown_keys() {
    let config = Config::from_toml(PPO, &["atari.life_loss=\"terminate\"".into()]).unwrap();
    let atari = config.atari.clone().unwrap();
    assert_eq!(atari.life_loss, rl_envs::LifeLoss::Terminate);
    assert_eq!(
        rl_envs::AtariConfig {
            life_loss: rl_envs::LifeLoss::Continue,
            ..atari
        },
        rl_envs::AtariConfig::default()
    );
    assert_eq!(
        Config::from_toml(&config.to_toml().unwrap(), &[]).unwrap(),
        config
    );
    let e = error(PPO, &["atari.lifeloss=1"]);
    assert!(e.key.starts_with("atari"), "{e}");
    let e = error(PPO, &["atari.life_loss=\"sometimes\""]);
    assert!(
        e.key.starts_with("atari") && e.message.contains("terminate"),
        "{e}"
    );
}
