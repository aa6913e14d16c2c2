use proptest::prelude::*;
use rl_core::Flag;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;
use crate::sampler_state;
use crate::storage::RingState;
use crate::without_replacement::test_support::{Fixture, fixture};

/// A window configuration: proper rows, burn-in rows, stride.
#[derive(Clone, Copy, Debug)]
struct Shape {
    slice_len: usize,
    burn_in: usize,
    stride: usize,
}

/// The defaults: contiguous windows without burn-in.
fn contiguous(slice_len: usize) -> Shape {
    Shape {
        slice_len,
        burn_in: 0,
        stride: 1,
    }
}

impl Shape {
    fn sampler(self, seed: u64) -> SliceSampler {
        SliceSampler::new(self.slice_len, seed)
            .unwrap()
            .with_burn_in(self.burn_in)
            .with_stride(self.stride)
            .unwrap()
    }

    fn window_len(self) -> usize {
        self.burn_in + self.slice_len
    }

    /// Rows before the first proper row.
    fn lead(self) -> usize {
        self.burn_in * self.stride
    }
}

fn shape() -> impl Strategy<Value = Shape> {
    (1usize..=5, 0usize..=3, 1usize..=4).prop_map(|(slice_len, burn_in, stride)| Shape {
        slice_len,
        burn_in,
        stride,
    })
}

/// Valid window starts (logical index of the first proper row), by brute force from the
/// definition.
fn valid_starts(context: &SampleContext<'_>, shape: Shape) -> Vec<usize> {
    let ring = context.ring;
    let Shape {
        slice_len, stride, ..
    } = shape;
    (0..ring.len)
        .filter(|&s| {
            s >= shape.lead()
                && s + (slice_len - 1) * stride < ring.len
                && (0..slice_len - 1)
                    .all(|k| !context.ends_episode(ring.position(s + k * stride, context.capacity)))
        })
        .collect()
}

/// The error expected when no window is valid: `(requested, available)`.
fn expected_refusal(context: &SampleContext<'_>, shape: Shape) -> (usize, usize) {
    let len = context.ring.len;
    let span = (shape.window_len() - 1) * shape.stride + 1;
    if span > len {
        return (span, len);
    }
    // The longest proper part that would fit.
    let longest = (1..=len)
        .rev()
        .find(|&slice_len| !valid_starts(context, Shape { slice_len, ..shape }).is_empty())
        .unwrap_or(0);
    (shape.slice_len, longest)
}

/// The logical index (0 = oldest) of a stored position.
fn logical(context: &SampleContext<'_>, position: usize) -> usize {
    let capacity = context.capacity;
    (position + capacity - context.ring.oldest(capacity)) % capacity
}

/// Checks one drawn window against the arithmetic; returns its start.
fn check_window(
    f: &Fixture,
    context: &SampleContext<'_>,
    shape: Shape,
    valid: &[usize],
    window: &[usize],
) -> Result<usize, TestCaseError> {
    prop_assert_eq!(window.len(), shape.window_len());
    prop_assert!(
        window.iter().all(|&p| f.is_stored(p)),
        "{:?} not stored",
        window
    );
    let start = logical(context, window[shape.burn_in]);
    prop_assert!(start >= shape.lead(), "{:?} starts at {}", window, start);
    prop_assert!(
        valid.contains(&start),
        "window {:?} starts at invalid {}",
        window,
        start
    );
    for (k, &position) in window.iter().enumerate() {
        let expected = f
            .ring
            .position(start - shape.lead() + k * shape.stride, f.capacity);
        prop_assert_eq!(position, expected, "row {} of {:?}", k, window);
    }
    let proper = &window[shape.burn_in..];
    for &position in &proper[..shape.slice_len - 1] {
        prop_assert!(
            !context.ends_episode(position),
            "{:?} crosses an episode end",
            window
        );
    }
    Ok(start)
}

fn check_windows(
    f: &Fixture,
    flags: bool,
    shape: Shape,
    windows: usize,
) -> Result<(), TestCaseError> {
    let context = if flags {
        f.context()
    } else {
        f.context_without_flags()
    };
    let rows = windows * shape.window_len();
    let mut sampler = shape.sampler(f.ring.cursor as u64);
    let (mut indices, mut weights) = (vec![usize::MAX; rows + 3], vec![0.0; rows + 3]);
    let result = sampler.sample(&context, rows, &mut indices, &mut weights);
    let valid = valid_starts(&context, shape);
    if f.ring.len == 0 {
        prop_assert!(matches!(result, Err(Error::Empty)));
        return Ok(());
    }
    if windows == 0 {
        prop_assert_eq!(result.unwrap(), 0);
        return Ok(());
    }
    if valid.is_empty() {
        let (want_requested, want_available) = expected_refusal(&context, shape);
        let refused = matches!(
            result,
            Err(Error::NotEnoughRows { requested, available })
                if requested == want_requested && available == want_available
        );
        prop_assert!(
            refused,
            "{:?}, expected {} requested and {} available",
            result,
            want_requested,
            want_available
        );
        return Ok(());
    }
    prop_assert_eq!(result.unwrap(), rows);
    prop_assert!(
        indices[rows..].iter().all(|&i| i == usize::MAX),
        "wrote past the batch"
    );
    prop_assert!(weights[..rows].iter().all(|&w| w == 1.0));
    for window in indices[..rows].chunks(shape.window_len()) {
        check_window(f, &context, shape, &valid, window)?;
    }
    Ok(())
}

/// A synchronous collector's rows: `envs` environments stepped `steps` times, each step
/// written as `envs` consecutive rows into a ring of `capacity` rows; `ends[e][t]` says
/// whether step `t` of environment `e` ends its episode.
struct Collected {
    fixture: Fixture,
    /// Per position: the environment, its step and its episode number.
    env: Vec<usize>,
    step: Vec<usize>,
    episode: Vec<usize>,
}

fn collect(capacity: usize, envs: usize, ends: &[Vec<bool>]) -> Collected {
    let steps = ends[0].len();
    let mut c = Collected {
        fixture: Fixture {
            ring: RingState::default(),
            capacity,
            terminated: vec![Flag::new(false); capacity],
            truncated: vec![Flag::new(false); capacity],
        },
        env: vec![usize::MAX; capacity],
        step: vec![usize::MAX; capacity],
        episode: vec![usize::MAX; capacity],
    };
    let mut episodes = vec![0; envs];
    let mut written = 0;
    for t in 0..steps {
        for (e, (episode, env_ends)) in episodes.iter_mut().zip(ends).enumerate() {
            let p = written % capacity;
            let end = env_ends[t];
            c.env[p] = e;
            c.step[p] = t;
            c.episode[p] = *episode;
            // Alternate the columns: either one ends an episode.
            let (terminated, truncated) = if t % 2 == 0 {
                (end, false)
            } else {
                (false, end)
            };
            c.fixture.terminated[p] = Flag::new(terminated);
            c.fixture.truncated[p] = Flag::new(truncated);
            *episode += usize::from(end);
            written += 1;
        }
    }
    c.fixture.ring = RingState {
        cursor: written % capacity,
        len: written.min(capacity),
        written: written as u64,
        ..RingState::default()
    };
    c
}

proptest! {
    #[test]
    fn windows_are_contiguous_and_inside_one_episode(
        f in fixture(48, 0, 5),
        slice_len in 1usize..7,
        windows in 0usize..6,
        flags in any::<bool>(),
    ) {
        check_windows(&f, flags, contiguous(slice_len), windows)?;
    }

    /// Burn-in and stride, on rings of every fill and wrap: every window has exactly the
    /// positions the arithmetic gives, in stored rows, with valid starts only.
    #[test]
    fn windows_with_burn_in_and_stride_follow_the_arithmetic(
        f in fixture(48, 0, 4),
        shape in shape(),
        windows in 0usize..6,
        flags in any::<bool>(),
    ) {
        check_windows(&f, flags, shape, windows)?;
    }

    #[test]
    fn rare_valid_windows_are_found_by_counting(
        f in fixture(300, 200, 1),
        slice_len in 2usize..5,
        burn_in in 0usize..=3,
        stride in 1usize..=4,
    ) {
        // flag_odds 1: every row ends an episode, so no window of 2 or more rows fits...
        let mut f = f;
        // ...except where a few rows are cleared, making the valid starts rare.
        for i in [17, 18, 19, 120, 133, 137, 141] {
            let position = f.ring.position(i % f.ring.len, f.capacity);
            f.terminated[position] = Flag::new(false);
            f.truncated[position] = Flag::new(false);
        }
        check_windows(&f, true, Shape { slice_len, burn_in, stride }, 5)?;
    }

    /// On small buffers, many draws reach every valid start and nothing else.
    #[test]
    fn every_valid_start_is_drawn_and_no_other(
        f in fixture(12, 0, 3),
        shape in shape(),
        flags in any::<bool>(),
    ) {
        check_windows(&f, flags, shape, 1)?;
        let context = if flags { f.context() } else { f.context_without_flags() };
        let valid = valid_starts(&context, shape);
        if valid.is_empty() {
            return Ok(()); // the refusal was checked above
        }
        let mut sampler = shape.sampler(f.capacity as u64);
        let rows = 100 * shape.window_len();
        let (mut indices, mut weights) = (vec![0; rows], vec![0.0; rows]);
        let mut drawn = std::collections::BTreeSet::new();
        for _ in 0..30 {
            prop_assert_eq!(sampler.sample(&context, rows, &mut indices, &mut weights).unwrap(), rows);
            for window in indices.chunks(shape.window_len()) {
                drawn.insert(check_window(&f, &context, shape, &valid, window)?);
            }
        }
        // At most 12 valid starts and 3000 draws: one is missed with probability below
        // 12 (11/12)^3000, about 1e-112.
        prop_assert_eq!(drawn.into_iter().collect::<Vec<_>>(), valid);
    }

    /// Rows as a synchronous collector writes them (each step of `envs` environments as
    /// `envs` consecutive rows, the ring wrapping anywhere): with stride `envs`, a window
    /// is consecutive steps of one environment, its proper rows in one episode, and one is
    /// drawn exactly when such steps are stored.
    #[test]
    fn strided_windows_follow_one_environment_step_by_step(
        capacity in 1usize..40,
        envs in 1usize..=4,
        burn_in in 0usize..=3,
        slice_len in 1usize..=5,
        ends in (1usize..=14).prop_flat_map(|steps| {
            proptest::collection::vec(proptest::collection::vec(proptest::bool::weighted(0.25), steps), 4)
        }),
    ) {
        let ends = &ends[..envs];
        let c = collect(capacity, envs, ends);
        let f = &c.fixture;
        let context = f.context();
        let shape = Shape { slice_len, burn_in, stride: envs };
        // The model, in the collector's terms: the step of environment `e` at write
        // number `t * envs + e` is stored if it is among the last `len` rows written.
        let steps = ends[0].len();
        let written = steps * envs;
        let stored = |e: usize, t: usize| t * envs + e >= written - f.ring.len;
        let episode = |e: usize, t: usize| ends[e][..t].iter().filter(|&&end| end).count();
        let exists = (0..envs).any(|e| {
            (burn_in..steps.saturating_sub(slice_len - 1)).any(|t| {
                (t - burn_in..t + slice_len).all(|j| stored(e, j))
                    && (t..t + slice_len).all(|j| episode(e, j) == episode(e, t))
            })
        });
        let mut sampler = shape.sampler(7);
        let rows = 20 * shape.window_len();
        let (mut indices, mut weights) = (vec![0; rows], vec![0.0; rows]);
        let result = sampler.sample(&context, rows, &mut indices, &mut weights);
        if !exists {
            prop_assert!(matches!(result, Err(Error::NotEnoughRows { .. })), "{:?}", result);
            return Ok(());
        }
        prop_assert_eq!(result.unwrap(), rows);
        for window in indices.chunks(shape.window_len()) {
            prop_assert!(window.iter().all(|&p| f.is_stored(p)), "{:?} not stored", window);
            let e = c.env[window[0]];
            let t = c.step[window[0]];
            for (k, &p) in window.iter().enumerate() {
                prop_assert_eq!((c.env[p], c.step[p]), (e, t + k), "row {} of {:?}", k, window);
            }
            let proper = &window[burn_in..];
            prop_assert!(
                proper.iter().all(|&p| c.episode[p] == c.episode[proper[0]]),
                "{:?} spans two episodes",
                window
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A saved state, loaded into a sampler of the same shape (another seed), continues
    /// the saved sampler's draws.
    #[test]
    fn a_saved_state_continues_the_same_draws(
        f in fixture(30, 1, 4),
        shape in shape(),
        seed in any::<u64>(),
        before in 0usize..4,
    ) {
        let context = f.context();
        prop_assume!(!valid_starts(&context, shape).is_empty());
        let rows = 3 * shape.window_len();
        let (mut indices, mut weights) = (vec![0; rows], vec![0.0; rows]);
        let mut original = shape.sampler(seed);
        for _ in 0..before {
            original.sample(&context, rows, &mut indices, &mut weights).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        prop_assert_eq!(sampler_state::save(&original, dir.path()).unwrap(), Some("slice"));
        let mut loaded = sampler_state::load(
            shape.sampler(seed.wrapping_add(1)),
            dir.path(),
            "slice",
            &f.ring,
            f.capacity,
        )
        .unwrap();
        let mut again = vec![0; rows];
        for _ in 0..3 {
            original.sample(&context, rows, &mut indices, &mut weights).unwrap();
            loaded.sample(&context, rows, &mut again, &mut weights).unwrap();
            prop_assert_eq!(&indices, &again);
        }
    }
}

#[test]
fn a_state_of_another_shape_is_refused_naming_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let saved = Shape {
        slice_len: 2,
        burn_in: 1,
        stride: 2,
    };
    sampler_state::save(&saved.sampler(0), dir.path()).unwrap();
    let load = |shape: Shape| {
        sampler_state::load(
            shape.sampler(0),
            dir.path(),
            "slice",
            &RingState::default(),
            1,
        )
    };
    let cases = [
        (
            Shape {
                slice_len: 3,
                ..saved
            },
            vec!["3-row windows"],
            vec!["2-row windows"],
        ),
        (
            Shape {
                burn_in: 0,
                ..saved
            },
            vec!["a burn-in of 0 rows"],
            vec!["a burn-in of 1 rows"],
        ),
        (
            Shape { stride: 1, ..saved },
            vec!["a stride of 1"],
            vec!["a stride of 2"],
        ),
        (
            Shape {
                slice_len: 4,
                burn_in: 3,
                stride: 5,
            },
            vec!["4-row windows", "a burn-in of 3 rows", "a stride of 5"],
            vec!["2-row windows", "a burn-in of 1 rows", "a stride of 2"],
        ),
    ];
    for (shape, expected_parts, found_parts) in cases {
        match load(shape) {
            Err(Error::SamplerMismatch {
                expected, found, ..
            }) => {
                for part in expected_parts {
                    assert!(expected.contains(part), "{expected} lacks {part}");
                }
                for part in found_parts {
                    assert!(found.contains(part), "{found} lacks {part}");
                }
                // Only what differs is named.
                for (differs, word) in [
                    (shape.slice_len != saved.slice_len, "-row"),
                    (shape.burn_in != saved.burn_in, "burn-in"),
                    (shape.stride != saved.stride, "stride"),
                ] {
                    assert_eq!(expected.contains(word), differs, "{expected}");
                    assert_eq!(found.contains(word), differs, "{found}");
                }
            }
            other => panic!("{shape:?}: {other:?}"),
        }
    }
    assert!(load(saved).is_ok());
}

/// The state layout of version 1 (slice length and generator only).
struct VersionOne;

impl Sampler for VersionOne {
    fn sample(
        &mut self,
        _: &SampleContext<'_>,
        _: usize,
        _: &mut [usize],
        _: &mut [f32],
    ) -> Result<usize> {
        Ok(0)
    }

    fn state_format(&self) -> Option<StateFormat> {
        Some(StateFormat {
            kind: "slice",
            version: 1,
        })
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        out.write_u64(2)?;
        sampler_state::write_rng(out, &Xoshiro256PlusPlus::seed_from_u64(0))
    }
}

#[test]
fn a_version_one_state_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    sampler_state::save(&VersionOne, dir.path()).unwrap();
    let result = sampler_state::load(
        SliceSampler::new(2, 0).unwrap(),
        dir.path(),
        "slice",
        &RingState::default(),
        1,
    );
    assert!(
        matches!(
            result,
            Err(Error::UnsupportedVersion {
                found: 1,
                supported: 2,
                ..
            })
        ),
        "{result:?}"
    );
}

#[test]
fn burn_in_and_stride_are_configured_and_checked() {
    let sampler = SliceSampler::new(3, 0).unwrap();
    assert_eq!(
        (sampler.burn_in(), sampler.stride(), sampler.window_len()),
        (0, 1, 3)
    );
    let sampler = sampler.with_burn_in(2).with_stride(4).unwrap();
    assert_eq!(
        (
            sampler.slice_len(),
            sampler.burn_in(),
            sampler.stride(),
            sampler.window_len()
        ),
        (3, 2, 4, 5)
    );
    let message = SliceSampler::new(3, 0)
        .unwrap()
        .with_stride(0)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("stride") && message.contains("zero"),
        "{message}"
    );

    let mut sampler = sampler;
    let (mut indices, mut weights) = ([0; 20], [0.0; 20]);
    let context = |len| SampleContext {
        ring: RingState {
            cursor: len % 20,
            len,
            written: len as u64,
            ..RingState::default()
        },
        capacity: 20,
        terminated: None,
        truncated: None,
    };
    let message = sampler
        .sample(&context(20), 6, &mut indices, &mut weights)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("not a multiple of the window length 5 (2 burn-in + 3 rows)"),
        "{message}"
    );
    // A window spans (5 - 1) * 4 + 1 = 17 rows.
    assert!(matches!(
        sampler.sample(&context(16), 5, &mut indices, &mut weights),
        Err(Error::NotEnoughRows {
            requested: 17,
            available: 16
        })
    ));
    assert_eq!(
        sampler
            .sample(&context(17), 20, &mut indices, &mut weights)
            .unwrap(),
        20
    );
    // The only window of 17 rows: burn-in 0, 4, then 8, 12, 16.
    for window in indices.chunks(5) {
        assert_eq!(window, [0, 4, 8, 12, 16]);
    }
}

#[test]
fn windows_wrap_around_the_end_of_the_positions() {
    let context = SampleContext {
        ring: RingState {
            cursor: 3,
            len: 10,
            written: 23,
            ..RingState::default()
        },
        capacity: 10,
        terminated: None,
        truncated: None,
    };
    let mut sampler = SliceSampler::new(4, 11).unwrap();
    let (mut indices, mut weights) = ([0; 400], [0.0; 400]);
    sampler
        .sample(&context, 400, &mut indices, &mut weights)
        .unwrap();
    let mut seen = [0usize; 7];
    for window in indices.chunks(4) {
        let start = (window[0] + 10 - 3) % 10;
        let expected: Vec<usize> = (0..4).map(|j| (window[0] + j) % 10).collect();
        assert_eq!(window, expected, "windows follow ring order");
        seen[start] += 1;
    }
    // Every start is drawn; starts 4, 5 and 6 (first positions 7, 8, 9) wrap from 9 to 0.
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    assert!(
        indices
            .chunks(4)
            .any(|w| w[..3].contains(&9) && w.contains(&0))
    );
}

#[test]
fn starts_are_uniform_over_valid_windows() {
    let capacity = 64;
    let ring = RingState {
        cursor: 20,
        len: 64,
        written: 500,
        ..RingState::default()
    };
    let mut terminated = vec![Flag::new(false); capacity];
    let mut truncated = vec![Flag::new(false); capacity];
    for p in [3, 11, 12, 30, 47] {
        terminated[p] = Flag::new(true);
    }
    for p in [19, 55] {
        truncated[p] = Flag::new(true);
    }
    let context = SampleContext {
        ring,
        capacity,
        terminated: Some(&terminated),
        truncated: Some(&truncated),
    };
    let shapes = [
        contiguous(5),
        Shape {
            slice_len: 3,
            burn_in: 2,
            stride: 2,
        },
        Shape {
            slice_len: 2,
            burn_in: 1,
            stride: 4,
        },
    ];
    for shape in shapes {
        let valid = valid_starts(&context, shape);
        let mut sampler = shape.sampler(42);
        let windows = 100;
        let rows = windows * shape.window_len();
        let (mut indices, mut weights) = (vec![0; rows], vec![0.0; rows]);
        let mut counts = vec![0u64; ring.len];
        let calls = 400;
        for _ in 0..calls {
            sampler
                .sample(&context, rows, &mut indices, &mut weights)
                .unwrap();
            for window in indices.chunks(shape.window_len()) {
                counts[logical(&context, window[shape.burn_in])] += 1;
            }
        }
        let draws = (calls * windows) as f64;
        let expected = draws / valid.len() as f64;
        let chi_square: f64 = valid
            .iter()
            .map(|&s| (counts[s] as f64 - expected).powi(2) / expected)
            .sum();
        let invalid: u64 = (0..ring.len)
            .filter(|s| !valid.contains(s))
            .map(|s| counts[s])
            .sum();
        assert_eq!(invalid, 0, "{shape:?}");
        // Chi-square with k - 1 degrees of freedom: mean k - 1, sd sqrt(2 (k - 1)); 5 sd.
        let df = (valid.len() - 1) as f64;
        assert!(
            chi_square < df + 5.0 * (2.0 * df).sqrt(),
            "{shape:?}: chi-square {chi_square:.1} with {df} degrees of freedom"
        );
    }
}

#[test]
fn the_counting_fallback_is_uniform_too() {
    // 1000 rows, all ending episodes but two 3-row stretches: 2 valid starts of 3 rows
    // among 998, so rejection almost always runs out and the scan picks.
    let capacity = 1000;
    let mut terminated = vec![Flag::new(true); capacity];
    for p in [100, 101, 700, 701] {
        terminated[p] = Flag::new(false);
    }
    let context = SampleContext {
        ring: RingState {
            cursor: 0,
            len: capacity,
            written: 5000,
            ..RingState::default()
        },
        capacity,
        terminated: Some(&terminated),
        truncated: None,
    };
    let mut sampler = SliceSampler::new(3, 9).unwrap();
    let (mut indices, mut weights) = ([0; 300], [0.0; 300]);
    let mut first = 0;
    for _ in 0..20 {
        sampler
            .sample(&context, 300, &mut indices, &mut weights)
            .unwrap();
        for window in indices.chunks(3) {
            assert!(
                window == [100, 101, 102] || window == [700, 701, 702],
                "{window:?}"
            );
            first += usize::from(window[0] == 100);
        }
    }
    // 2000 fair coin flips: sd 22.4, 5 sd.
    assert!(
        (first as f64 - 1000.0).abs() < 5.0 * 22.4,
        "{first} of 2000"
    );
}

#[test]
fn invalid_requests_are_refused() {
    assert!(SliceSampler::new(0, 0).is_err());
    let mut sampler = SliceSampler::new(4, 0).unwrap();
    let (mut indices, mut weights) = ([0; 8], [0.0; 8]);
    let context = |len| SampleContext {
        ring: RingState {
            cursor: len % 8,
            len,
            written: len as u64,
            ..RingState::default()
        },
        capacity: 8,
        terminated: None,
        truncated: None,
    };
    let message = sampler
        .sample(&context(8), 6, &mut indices, &mut weights)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("not a multiple of the slice length 4"),
        "{message}"
    );
    assert!(matches!(
        sampler.sample(&context(0), 4, &mut indices, &mut weights),
        Err(Error::Empty)
    ));
    assert!(matches!(
        sampler.sample(&context(3), 4, &mut indices, &mut weights),
        Err(Error::NotEnoughRows {
            requested: 4,
            available: 3
        })
    ));
    // Room for fewer rows than asked: refused, not cut to one window.
    assert!(matches!(
        sampler.sample(&context(8), 8, &mut indices[..6], &mut weights),
        Err(Error::BatchTooSmall {
            requested: 8,
            room: 6
        })
    ));
    assert_eq!(
        sampler
            .sample(&context(8), 4, &mut indices[..6], &mut weights)
            .unwrap(),
        4
    );
    assert_eq!(
        sampler
            .sample(&context(8), 0, &mut indices, &mut weights)
            .unwrap(),
        0
    );
}

#[test]
fn sampling_allocates_nothing() {
    let capacity = 2000;
    let mut terminated = vec![Flag::new(false); capacity];
    for p in (0..capacity).step_by(7) {
        terminated[p] = Flag::new(true);
    }
    // Mostly ending rows: the fallback scan runs too.
    let truncated: Vec<Flag> = (0..capacity).map(|p| Flag::new(p < 1990)).collect();
    let dense = SampleContext {
        ring: RingState {
            cursor: 1500,
            len: capacity,
            written: 9000,
            ..RingState::default()
        },
        capacity,
        terminated: Some(&terminated),
        truncated: None,
    };
    let sparse = SampleContext {
        truncated: Some(&truncated),
        ..dense
    };
    let mut contiguous = SliceSampler::new(4, 3).unwrap();
    // Windows of 8 rows: 4 burn-in, 4 proper, every other row.
    let mut strided = Shape {
        slice_len: 4,
        burn_in: 4,
        stride: 2,
    }
    .sampler(3);
    let (mut indices, mut weights) = ([0; 64], [0.0; 64]);
    let ((), stats) = rl_testkit::measure(|| {
        for _ in 0..50 {
            for context in [&dense, &sparse] {
                for sampler in [&mut contiguous, &mut strided] {
                    let drawn = sampler
                        .sample(context, 64, &mut indices, &mut weights)
                        .unwrap();
                    assert_eq!(drawn, 64);
                }
            }
        }
    });
    assert_eq!(stats.allocations, 0);
}
