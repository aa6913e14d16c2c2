use super::*;
use crate::Catch;

/// A fake game of `h × w` RGB frames. Frame `t` (frames since reset) is black with one
/// white pixel at `t % (h * w)`; frame `t` pays `t - 3`; the game ends at frame `length`;
/// the player has `3 - t / life_every` lives (never below 0).
#[derive(Clone, Debug)]
struct Screens {
    h: usize,
    w: usize,
    length: u32,
    life_every: u32,
    t: u32,
    resets: u32,
    last_action: u32,
    ended: bool,
    /// `step_unobserved` leaves the frame as it was (as an emulator that does not render
    /// it), unless the game ends.
    blind: bool,
    /// Calls of `step_unobserved`.
    unobserved: u32,
    observation_space: Space,
    action_space: Space,
}

impl Screens {
    fn new(h: usize, w: usize, length: u32) -> Self {
        Self {
            h,
            w,
            length,
            life_every: u32::MAX,
            t: 0,
            resets: 0,
            last_action: 0,
            ended: true,
            blind: false,
            unobserved: 0,
            observation_space: Space::Box(
                BoxSpace::uniform(0.0, 255.0, &[h, w, 3], DType::U8).unwrap(),
            ),
            action_space: Space::Discrete { n: 4 },
        }
    }

    fn draw(&self, obs: &mut [u8]) {
        obs.fill(0);
        let at = (self.t as usize % (self.h * self.w)) * 3;
        obs[at..at + 3].fill(255);
    }
}

impl Env for Screens {
    type Obs = u8;
    type Act = u32;
    fn observation_space(&self) -> &Space {
        &self.observation_space
    }
    fn action_space(&self) -> &Space {
        &self.action_space
    }
    fn reset(&mut self, _: Option<u64>, obs: &mut [u8]) -> Result<()> {
        check_len("observation buffer", self.h * self.w * 3, obs.len())?;
        (self.t, self.ended) = (0, false);
        self.resets += 1;
        self.draw(obs);
        Ok(())
    }
    fn step(&mut self, action: &[u32], obs: &mut [u8]) -> Result<Step> {
        check_len("observation buffer", self.h * self.w * 3, obs.len())?;
        self.last_action = discrete_action(action, 4)?;
        assert!(!self.ended, "the wrapper stepped an ended game");
        self.t += 1;
        self.ended = self.t == self.length;
        self.draw(obs);
        Ok(Step {
            reward: self.t as f32 - 3.0,
            terminated: self.ended,
            truncated: false,
        })
    }
    fn step_unobserved(&mut self, action: &[u32], obs: &mut [u8]) -> Result<Step> {
        self.unobserved += 1;
        if !self.blind {
            return self.step(action, obs);
        }
        let mut frame = obs.to_vec();
        let step = self.step(action, &mut frame)?;
        if step.ends_episode() {
            obs.copy_from_slice(&frame);
        }
        Ok(step)
    }
    fn save_state(&self) -> Option<Vec<u8>> {
        serde_json::to_vec(&(self.t, self.resets, self.ended)).ok()
    }
    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        (self.t, self.resets, self.ended) =
            serde_json::from_slice(state).map_err(|e| Error::EnvState {
                problem: e.to_string(),
            })?;
        Ok(())
    }
}

impl Lives for Screens {
    fn lives(&self) -> u32 {
        3u32.saturating_sub(self.t / self.life_every)
    }
}

/// No no-ops, frames kept at the fake's `4 × 6`, a stack of 4, raw rewards.
fn plain() -> AtariConfig {
    AtariConfig {
        noop_max: 0,
        screen: [4, 6],
        rewards: Rewards::Raw,
        ..AtariConfig::default()
    }
}

/// A `4 × 6` gray frame with the given pixels white.
fn lit(pixels: &[usize]) -> Vec<u8> {
    let mut frame = vec![0u8; 24];
    for &p in pixels {
        frame[p] = 255;
    }
    frame
}

#[test]
fn a_step_repeats_the_action_four_frames_and_sums_their_rewards() {
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 100), plain(), 0).unwrap();
    let mut obs = vec![0u8; 4 * 24];
    env.reset(None, &mut obs).unwrap();
    let step = env.step(&[2], &mut obs).unwrap();
    // Frames 1..=4 pay -2, -1, 0, 1.
    assert_eq!(
        (step.reward, env.inner().t, env.inner().last_action),
        (-2.0, 4, 2)
    );
    let step = env.step(&[3], &mut obs).unwrap();
    assert_eq!(
        (step.reward, env.raw_reward(), env.score()),
        (14.0, 14.0, 12.0)
    );
    assert_eq!(env.inner().t, 8);
}

#[test]
fn clipped_rewards_are_signs_and_the_score_stays_unclipped() {
    let config = AtariConfig {
        rewards: Rewards::Clipped,
        ..plain()
    };
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 100), config, 0).unwrap();
    let mut obs = vec![0u8; 4 * 24];
    env.reset(None, &mut obs).unwrap();
    let rewards: Vec<f32> = (0..2)
        .map(|_| env.step(&[0], &mut obs).unwrap().reward)
        .collect();
    assert_eq!(rewards, [-1.0, 1.0]);
    assert_eq!((env.raw_reward(), env.score()), (14.0, 12.0));
    // A skip of 5 from the start pays -2 - 1 + 0 + 1 + 2 = 0: sign 0, not 1.
    let config = AtariConfig {
        frame_skip: 5,
        rewards: Rewards::Clipped,
        ..plain()
    };
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 100), config, 0).unwrap();
    env.reset(None, &mut obs).unwrap();
    assert_eq!(env.step(&[0], &mut obs).unwrap().reward, 0.0);
}

#[test]
fn observations_max_pool_the_last_two_frames_and_stack_oldest_first() {
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 100), plain(), 0).unwrap();
    let space = env.observation_space().clone();
    assert_eq!(space.flat_len(), 4 * 4 * 6);
    let mut obs = vec![0u8; space.flat_len()];
    env.reset(None, &mut obs).unwrap();
    // The first frame, repeated behind itself.
    assert_eq!(obs, lit(&[0]).repeat(4));
    env.step(&[1], &mut obs).unwrap();
    // Frames 3 and 4 max-pooled, after three copies of the reset frame.
    assert_eq!(obs, [lit(&[0]).repeat(3), lit(&[3, 4])].concat());
    env.step(&[1], &mut obs).unwrap();
    env.step(&[1], &mut obs).unwrap();
    env.step(&[1], &mut obs).unwrap();
    let want = [lit(&[3, 4]), lit(&[7, 8]), lit(&[11, 12]), lit(&[15, 16])].concat();
    assert_eq!(obs, want);
    assert!(space.contains(&obs));
    // Zero padding, and a skip of one frame: nothing to pool.
    let config = AtariConfig {
        frame_skip: 1,
        padding: StackPadding::Zeros,
        ..plain()
    };
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 100), config, 0).unwrap();
    env.reset(None, &mut obs).unwrap();
    env.step(&[1], &mut obs).unwrap();
    assert_eq!(obs, [vec![0; 48], lit(&[0]), lit(&[1])].concat());
}

#[test]
fn frames_are_gray_and_resized() {
    // 8 x 12 halved to 4 x 6: a lone white pixel becomes a quarter-white one, (255 + 2) >> 2.
    let config = AtariConfig {
        frame_skip: 1,
        ..plain()
    };
    let mut env = AtariPreprocess::new(Screens::new(8, 12, 100), config, 0).unwrap();
    let mut obs = vec![0u8; 4 * 24];
    env.reset(None, &mut obs).unwrap();
    let mut want = [0u8; 24];
    want[0] = 64;
    assert_eq!(&obs[72..], &want[..]);
    // The default pipeline over Atari-sized frames.
    let mut env =
        AtariPreprocess::new(Screens::new(210, 160, 100), AtariConfig::default(), 1).unwrap();
    let mut obs = vec![0u8; 4 * 84 * 84];
    env.reset(None, &mut obs).unwrap();
    let step = env.step(&[1], &mut obs).unwrap();
    assert!(env.observation_space().contains(&obs));
    assert!(step.reward.abs() <= 1.0);
}

#[test]
fn noop_starts_are_drawn_from_the_seed() {
    let config = AtariConfig {
        noop_max: 30,
        ..plain()
    };
    let mut obs = vec![0u8; 4 * 24];
    let noops = |seed: Option<u64>, env: &mut AtariPreprocess<Screens>| {
        env.reset(seed, &mut [0u8; 96]).unwrap();
        env.inner().t
    };
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 1000), config.clone(), 5).unwrap();
    let drawn: Vec<u32> = (0..200).map(|s| noops(Some(s), &mut env)).collect();
    assert!(drawn.iter().all(|n| (1..=30).contains(n)), "{drawn:?}");
    assert!(
        (1..=30).all(|n| drawn.contains(&n)),
        "every count from 1 to 30 appears"
    );
    assert_eq!(noops(Some(17), &mut env), drawn[17]);
    // The observation is the last no-op frame.
    env.reset(Some(17), &mut obs).unwrap();
    assert_eq!(&obs[72..], &lit(&[drawn[17] as usize % 24])[..]);
    // Unseeded resets continue the stream; the construction seed starts it.
    let mut a = AtariPreprocess::new(Screens::new(4, 6, 1000), config.clone(), 9).unwrap();
    let mut b = AtariPreprocess::new(Screens::new(4, 6, 1000), config, 9).unwrap();
    let run =
        |env: &mut AtariPreprocess<Screens>| (0..20).map(|_| noops(None, env)).collect::<Vec<_>>();
    let (first, second) = (run(&mut a), run(&mut b));
    assert_eq!(first, second);
    assert!(first.windows(2).any(|w| w[0] != w[1]));
}

#[test]
fn a_game_ending_inside_a_skip_stops_it() {
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 6), plain(), 0).unwrap();
    let mut obs = vec![0u8; 4 * 24];
    env.reset(None, &mut obs).unwrap();
    env.step(&[0], &mut obs).unwrap();
    let step = env.step(&[0], &mut obs).unwrap();
    // Frames 5 and 6 pay 2 + 3; the game ended on the second frame of the skip, before
    // the two the skip looks at, so frame 5 was not asked for and 6 stands alone.
    assert!(step.terminated && !step.truncated);
    assert_eq!((step.reward, env.inner().t), (5.0, 6));
    assert_eq!(&obs[72..], &lit(&[6])[..]);
    assert_eq!(env.last_score(), Some(3.0));
    assert!(matches!(
        env.step(&[0], &mut obs),
        Err(Error::NeedsReset { .. })
    ));
    // Ending on the first frame of a skip: that frame alone.
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 5), plain(), 0).unwrap();
    env.reset(None, &mut obs).unwrap();
    env.step(&[0], &mut obs).unwrap();
    assert!(env.step(&[0], &mut obs).unwrap().terminated);
    assert_eq!(&obs[72..], &lit(&[5])[..]);
    env.reset(None, &mut obs).unwrap();
    assert_eq!((env.inner().resets, env.score()), (2, 0.0));
    // Ending on the last frame of a skip: pooled with the frame before it.
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 8), plain(), 0).unwrap();
    env.reset(None, &mut obs).unwrap();
    env.step(&[0], &mut obs).unwrap();
    assert!(env.step(&[0], &mut obs).unwrap().terminated);
    assert_eq!(&obs[72..], &lit(&[7, 8])[..]);
}

/// The frames a step never looks at (the first two of a skip of 4, every no-op but the
/// last) go through `step_unobserved`, and an environment that does not render them
/// (which leaves the frame buffer as it was) gives the same observations, rewards and
/// flags as one that does, over games that end at every frame of a skip.
#[test]
fn frames_never_looked_at_are_not_asked_for_and_skipping_them_changes_nothing() {
    let config = AtariConfig {
        noop_max: 5,
        ..plain()
    };
    for length in 9..17 {
        let mut blind_game = Screens::new(4, 6, length);
        blind_game.blind = true;
        let mut blind = AtariPreprocess::new(blind_game, config.clone(), 3).unwrap();
        let mut seeing =
            AtariPreprocess::new(Screens::new(4, 6, length), config.clone(), 3).unwrap();
        let (mut a, mut b) = (vec![0u8; 4 * 24], vec![0u8; 4 * 24]);
        let (mut steps, mut full_skips) = (0u32, 0u32);
        for episode in 0..6 {
            blind.reset(None, &mut a).unwrap();
            seeing.reset(None, &mut b).unwrap();
            assert_eq!(a, b, "length {length}, episode {episode}: reset");
            loop {
                let before = blind.inner().t;
                let (x, y) = (
                    blind.step(&[1], &mut a).unwrap(),
                    seeing.step(&[1], &mut b).unwrap(),
                );
                assert_eq!(
                    (x, &a),
                    (y, &b),
                    "length {length}, episode {episode}, step {steps}"
                );
                steps += 1;
                if blind.inner().t - before == 4 {
                    full_skips += 1;
                }
                if x.ends_episode() {
                    break;
                }
            }
        }
        let unobserved = blind.inner().unobserved;
        assert_eq!(unobserved, seeing.inner().unobserved);
        // Two unobserved frames per full skip, at most three per short one, and the
        // no-ops before the last of each reset.
        assert!(
            unobserved >= 2 * full_skips,
            "length {length}: {unobserved} unobserved"
        );
        assert!(
            unobserved <= 3 * steps + 6 * 4,
            "length {length}: {unobserved} unobserved"
        );
    }
}

#[test]
fn a_lost_life_can_end_the_episode_while_the_game_goes_on() {
    let mut game = Screens::new(4, 6, 100);
    game.life_every = 6;
    let config = AtariConfig {
        life_loss: LifeLoss::Terminate,
        ..plain()
    };
    assert!(AtariPreprocess::new(game.clone(), config.clone(), 0).is_err());
    let mut env = AtariPreprocess::with_lives(game.clone(), config, 0).unwrap();
    let mut obs = vec![0u8; 4 * 24];
    env.reset(None, &mut obs).unwrap();
    assert_eq!(env.lives(), 3);
    assert!(!env.step(&[0], &mut obs).unwrap().terminated);
    // Frame 6 costs a life.
    let step = env.step(&[0], &mut obs).unwrap();
    assert!(step.terminated);
    assert_eq!(
        (env.lives(), env.score(), env.last_score()),
        (2, 12.0, None)
    );
    // The next reset plays one no-op step (frames 9..=12) instead of restarting.
    env.reset(None, &mut obs).unwrap();
    assert_eq!(
        (env.inner().resets, env.inner().t, env.inner().last_action),
        (1, 12, 0)
    );
    assert_eq!(env.score(), 12.0 + 6.0 + 7.0 + 8.0 + 9.0);
    assert_eq!(obs, lit(&[11, 12]).repeat(4));
    // A seeded reset restarts the game.
    env.reset(Some(1), &mut obs).unwrap();
    assert_eq!(
        (env.inner().resets, env.inner().t, env.score()),
        (2, 0, 0.0)
    );
    // Without Terminate, lives only count.
    let mut env = AtariPreprocess::with_lives(game, plain(), 0).unwrap();
    env.reset(None, &mut obs).unwrap();
    for _ in 0..4 {
        assert!(!env.step(&[0], &mut obs).unwrap().terminated);
    }
    assert_eq!(env.lives(), 1);
}

#[test]
fn invalid_input_and_settings_are_refused() {
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 100), plain(), 0).unwrap();
    let mut obs = vec![0u8; 96];
    assert!(matches!(
        env.step(&[0], &mut obs),
        Err(Error::NeedsReset { .. })
    ));
    env.reset(None, &mut obs).unwrap();
    let (seen, state) = (obs.clone(), env.save_state().unwrap());
    assert!(matches!(
        env.step(&[4], &mut obs),
        Err(Error::ActionOutOfRange { index: 4, n: 4 })
    ));
    assert!(env.step(&[0], &mut obs[1..]).is_err());
    assert!(env.reset(None, &mut [0u8; 95]).is_err());
    assert_eq!((obs, env.save_state().unwrap()), (seen, state));
    let screens = || Screens::new(4, 6, 100);
    for bad in [
        AtariConfig {
            frame_skip: 0,
            ..plain()
        },
        AtariConfig {
            stack: 0,
            ..plain()
        },
        AtariConfig {
            screen: [5, 6],
            ..plain()
        },
        AtariConfig {
            screen: [0, 6],
            ..plain()
        },
        AtariConfig {
            noop_action: 4,
            ..plain()
        },
    ] {
        assert!(
            AtariPreprocess::new(screens(), bad.clone(), 0).is_err(),
            "{bad:?}"
        );
    }
    let error = AtariPreprocess::new(Catch::new(0), plain(), 0).unwrap_err();
    assert!(error.to_string().contains("RGB"), "{error}");
}

#[test]
fn a_restored_wrapper_steps_as_the_saved_one() {
    let config = AtariConfig {
        noop_max: 30,
        ..plain()
    };
    let run = |env: &mut AtariPreprocess<Screens>, steps: usize| {
        let mut obs = vec![0u8; 96];
        let mut out = Vec::new();
        for i in 0..steps {
            let step = env.step(&[(i % 4) as u32], &mut obs).unwrap();
            out.push((
                obs.clone(),
                step.reward.to_bits(),
                step.terminated,
                env.score().to_bits(),
            ));
            if step.ends_episode() {
                env.reset(None, &mut obs).unwrap();
                out.push((obs.clone(), 0, false, env.inner().t));
            }
        }
        out
    };
    let mut env = AtariPreprocess::new(Screens::new(4, 6, 37), config.clone(), 3).unwrap();
    env.reset(Some(3), &mut [0u8; 96]).unwrap();
    run(&mut env, 7);
    let state = env.save_state().unwrap();
    let expected = run(&mut env, 40);
    let mut other = AtariPreprocess::new(Screens::new(4, 6, 37), config, 4).unwrap();
    other.reset(Some(8), &mut [0u8; 96]).unwrap();
    other.restore_state(&state).unwrap();
    assert_eq!(run(&mut other, 40), expected);
    // Another stack size refuses the state and changes nothing.
    let mut small = AtariPreprocess::new(
        Screens::new(4, 6, 37),
        AtariConfig {
            stack: 2,
            ..plain()
        },
        0,
    )
    .unwrap();
    small.reset(Some(0), &mut [0u8; 48]).unwrap();
    let before = small.save_state().unwrap();
    assert!(matches!(
        small.restore_state(&state),
        Err(Error::EnvState { .. })
    ));
    assert_eq!(small.save_state().unwrap(), before);
}

/// In evaluation (`Env::set_evaluation(true)`) the rewards are the game's and a lost
/// life goes on: an episode's return is its score; training keeps clipping and ending
/// episodes at lost lives.
#[test]
fn evaluation_returns_the_true_score_over_whole_games() {
    let mut game = Screens::new(4, 6, 40);
    game.life_every = 6;
    let config = AtariConfig {
        rewards: Rewards::Clipped,
        life_loss: LifeLoss::Terminate,
        ..plain()
    };
    let play = |evaluation: bool| {
        let mut env = AtariPreprocess::with_lives(game.clone(), config.clone(), 0).unwrap();
        env.set_evaluation(evaluation);
        let mut obs = vec![0u8; 4 * 24];
        env.reset(Some(0), &mut obs).unwrap();
        let (mut total, mut steps) = (0.0, 0);
        loop {
            let step = env.step(&[0], &mut obs).unwrap();
            total += step.reward;
            steps += 1;
            if step.ends_episode() {
                return (total, steps, env.score());
            }
        }
    };
    // Training: the episode ends at the first lost life (frame 6), rewards clipped.
    let (total, steps, _) = play(false);
    assert_eq!((total, steps), (-1.0 + 1.0, 2));
    // Evaluation: the whole game (40 frames, 10 steps), the return is the score.
    let (total, steps, score) = play(true);
    assert_eq!(steps, 10);
    assert_eq!(total, score);
    assert_eq!(total, (1..=40).map(|t| t as f32 - 3.0).sum::<f32>());
}

#[test]
fn fire_reset_presses_fire_then_action_2_after_every_reset() {
    let config = AtariConfig {
        fire_reset: true,
        life_loss: LifeLoss::Terminate,
        ..plain()
    };
    let mut game = Screens::new(4, 6, 100);
    game.life_every = 20;
    let mut env = AtariPreprocess::with_lives(game, config.clone(), 0).unwrap();
    let mut obs = vec![0u8; 4 * 24];
    env.reset(None, &mut obs).unwrap();
    // FIRE for 4 frames, then action 2 for 4: the game is 8 frames in, reward counted.
    assert_eq!((env.inner().t, env.inner().last_action), (8, 2));
    assert_eq!(env.score(), (1..=8).map(|t| t as f32 - 3.0).sum::<f32>());
    // The observation is that of frame 8, max-pooled with frame 7.
    assert_eq!(&obs[3 * 24..], &lit(&[7, 8])[..]);
    // A lost life (frame 20) ends the episode; the reset goes on with a no-op, then the
    // two presses.
    let mut ended = false;
    while !ended {
        ended = env.step(&[0], &mut obs).unwrap().terminated;
    }
    assert_eq!(env.inner().t, 20);
    env.reset(None, &mut obs).unwrap();
    assert_eq!((env.inner().t, env.inner().resets), (32, 1));
    // A game that ends during the presses restarts (without pressing again, as SB3's
    // FireResetEnv).
    let mut short = AtariPreprocess::new(
        Screens::new(4, 6, 6),
        AtariConfig {
            fire_reset: true,
            ..plain()
        },
        0,
    )
    .unwrap();
    short.reset(None, &mut obs).unwrap();
    assert_eq!((short.inner().resets, short.inner().t), (2, 0));
    assert_eq!(
        short.last_score(),
        Some((1..=6).map(|t| t as f32 - 3.0).sum())
    );
    // Fewer than 3 actions cannot have FIRE and action 2.
    let mut two = Screens::new(4, 6, 100);
    two.action_space = Space::Discrete { n: 2 };
    let fire = AtariConfig {
        fire_reset: true,
        ..plain()
    };
    let error = AtariPreprocess::new(two, fire, 0).unwrap_err();
    assert!(error.to_string().contains("fire"), "{error}");
}
