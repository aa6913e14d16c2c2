use rl_core::{Column, DType, Field, Flag, Schema};

use super::*;
use crate::sampler::PrioritizedConfig;
use crate::{Batch, ColumnSlice, Error, ram::RamStorage, replay::ReplayBuffer};

const CAPACITY: usize = 24;

fn schema() -> Schema {
    Schema::new([
        Column::scalar("id", DType::I64),
        Column::scalar(Field::Terminated.name(), DType::Bool),
        Column::scalar(Field::Truncated.name(), DType::Bool),
    ])
    .unwrap()
}

fn buffer<P: Sampler>(sampler: P) -> ReplayBuffer<RamStorage, P> {
    ReplayBuffer::new(RamStorage::new(schema(), CAPACITY, None).unwrap(), sampler)
}

/// Writes rows `ids` (an episode ends every 5 rows, by termination or truncation).
fn write<P: Sampler>(buffer: &mut ReplayBuffer<RamStorage, P>, ids: std::ops::Range<i64>) {
    let id: Vec<i64> = ids.clone().collect();
    let terminated: Vec<Flag> = ids.clone().map(|i| Flag::new(i % 10 == 4)).collect();
    let truncated: Vec<Flag> = ids.map(|i| Flag::new(i % 10 == 9)).collect();
    buffer
        .extend(&[
            ColumnSlice::from(&id),
            (&terminated).into(),
            (&truncated).into(),
        ])
        .unwrap();
}

/// The positions and weights of `batches` batches of 8 rows.
fn draws<P: Sampler>(
    buffer: &mut ReplayBuffer<RamStorage, P>,
    batches: usize,
) -> Vec<(Vec<usize>, Vec<f32>)> {
    let mut batch = Batch::new(&schema(), 8).unwrap();
    (0..batches)
        .map(|_| {
            buffer.sample(&mut batch).unwrap();
            (batch.positions().to_vec(), batch.weights().to_vec())
        })
        .collect()
}

fn prioritized(seed: u64) -> Prioritized {
    let config = PrioritizedConfig {
        alpha: 0.7,
        beta: 0.5,
        epsilon: 1e-3,
    };
    Prioritized::new(CAPACITY, config, seed).unwrap()
}

fn slice(seed: u64) -> SliceSampler {
    SliceSampler::new(4, seed).unwrap()
}

/// Gives the rows of the last draw priorities that depend on their position, so that the
/// draws after it are far from uniform.
fn reprioritize(sampler: &mut Prioritized, positions: &[usize]) {
    let priorities: Vec<f32> = positions.iter().map(|&p| 1.0 + (p % 7) as f32).collect();
    sampler.update_priorities(positions, &priorities).unwrap();
}

/// The same writes and draws through the bare sampler and through the enum give the same
/// positions and weights, for every kind (a wrong arm would draw another sequence).
#[test]
fn forwards_to_the_sampler_inside() {
    let mut bare = buffer(Uniform::new(7));
    let mut any = buffer(AnySampler::from(Uniform::new(7)));
    write(&mut bare, 0..30);
    write(&mut any, 0..30);
    assert_eq!(draws(&mut any, 5), draws(&mut bare, 5));

    let mut bare = buffer(slice(7));
    let mut any = buffer(AnySampler::from(slice(7)));
    write(&mut bare, 0..30);
    write(&mut any, 0..30);
    let drawn = draws(&mut any, 5);
    assert_eq!(drawn, draws(&mut bare, 5));
    // Whole windows: four consecutive positions each.
    for (positions, _) in &drawn {
        for window in positions.chunks(4) {
            for pair in window.windows(2) {
                assert_eq!(pair[1], (pair[0] + 1) % CAPACITY, "{positions:?}");
            }
        }
    }

    let mut bare = buffer(prioritized(7));
    let mut any = buffer(AnySampler::from(prioritized(7)));
    for round in 0..4 {
        write(&mut bare, round * 9..round * 9 + 9);
        write(&mut any, round * 9..round * 9 + 9);
        let (bare_draw, any_draw) = (draws(&mut bare, 1), draws(&mut any, 1));
        assert_eq!(any_draw, bare_draw);
        reprioritize(bare.sampler_mut(), &bare_draw[0].0);
        reprioritize(
            any.sampler_mut().as_prioritized_mut().unwrap(),
            &any_draw[0].0,
        );
    }
    let (any_draw, bare_draw) = (draws(&mut any, 1), draws(&mut bare, 1));
    assert_eq!(any_draw, bare_draw);
    assert!(
        bare_draw[0].1.iter().any(|&w| w != 1.0),
        "the priorities were meant to make the weights differ"
    );
    assert_eq!(draws(&mut any, 3), draws(&mut bare, 3));
    assert_eq!(any.memory_plan(), bare.memory_plan());
    assert_eq!(any.sampler().state_format(), bare.sampler().state_format());
}

#[test]
fn as_prioritized_is_some_for_the_prioritized_kind_only() {
    let mut samplers = [
        AnySampler::from(Uniform::new(0)),
        AnySampler::from(prioritized(0)),
        AnySampler::from(slice(0)),
    ];
    let kinds: Vec<(bool, bool, bool)> = samplers
        .iter_mut()
        .map(|s| {
            (
                s.as_prioritized().is_some(),
                s.as_slice().is_some(),
                s.as_prioritized_mut().is_some(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (false, false, false),
            (true, false, true),
            (false, true, false)
        ]
    );
    // The plan is the sampler inside's: the trees for prioritized, nothing for uniform.
    assert_eq!(samplers[1].memory_plan(), prioritized(0).memory_plan());
    assert!(samplers[0].memory_plan().lines().is_empty());
}

/// A checkpoint of a buffer over the enum loads into a fresh enum of the same kind (built
/// with another seed) that then draws what the saved buffer draws next, and the file is
/// the bare sampler's: it loads into a bare sampler and back.
#[test]
fn saved_state_round_trips_through_the_enum() {
    type Make = fn(u64) -> AnySampler;
    let kinds: [Make; 3] = [
        |seed| Uniform::new(seed).into(),
        |seed| prioritized(seed).into(),
        |seed| slice(seed).into(),
    ];
    for make in kinds {
        let dir = tempfile::tempdir().unwrap();
        let mut saved = buffer(make(3));
        write(&mut saved, 0..40);
        let first = draws(&mut saved, 2);
        if let Some(p) = saved.sampler_mut().as_prioritized_mut() {
            reprioritize(p, &first[1].0);
        }
        saved.save(dir.path()).unwrap();

        let mut loaded =
            ReplayBuffer::<RamStorage, AnySampler>::load(dir.path(), make(99)).unwrap();
        let mut fresh = buffer(make(99));
        write(&mut fresh, 0..40);
        let expected = draws(&mut saved, 4);
        assert_ne!(draws(&mut fresh, 4), expected, "{:?}", make(0));
        assert_eq!(draws(&mut loaded, 4), expected, "{:?}", make(0));

        // The same file, read by the bare sampler of that kind.
        let bare_draws = match make(99) {
            AnySampler::Uniform(s) => draws(&mut ReplayBuffer::load(dir.path(), s).unwrap(), 4),
            AnySampler::Prioritized(s) => draws(&mut ReplayBuffer::load(dir.path(), s).unwrap(), 4),
            AnySampler::Slice(s) => draws(&mut ReplayBuffer::load(dir.path(), s).unwrap(), 4),
        };
        assert_eq!(bare_draws, expected);
    }
}

/// A state saved by one kind is refused by an enum holding another.
#[test]
fn another_kind_is_refused_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut saved = buffer(AnySampler::from(Uniform::new(0)));
    write(&mut saved, 0..10);
    saved.save(dir.path()).unwrap();
    let err = ReplayBuffer::<RamStorage, AnySampler>::load(dir.path(), prioritized(0).into())
        .unwrap_err();
    assert!(matches!(err, Error::SamplerMismatch { .. }), "{err}");
}
