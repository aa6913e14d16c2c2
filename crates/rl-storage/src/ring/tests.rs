use super::*;

#[test]
fn plans_split_at_the_end_of_the_ring_and_skip_what_a_long_write_overwrites() {
    let ring = RingState {
        cursor: 8,
        len: 8,
        written: 8,
        ..RingState::default()
    };
    let plan = plan_write(&ring, 5, 10);
    assert_eq!((plan.skipped, plan.written), (0, 5));
    let [a, b] = plan.segments(10);
    assert_eq!((a.position, a.source_row, a.rows), (8, 0, 2));
    assert_eq!((b.position, b.source_row, b.rows), (0, 2, 3));
    let after = ring_after(
        &ring,
        &plan,
        10,
        EpisodeEnds {
            count: 1,
            last: Some(3),
        },
    );
    assert_eq!((after.cursor, after.len, after.written), (3, 10, 13));
    assert_eq!((after.episodes, after.episode_start), (1, 12));
    let long = plan_write(&ring, 25, 10);
    assert_eq!(
        (
            long.skipped,
            long.written,
            long.start.cursor,
            long.start.len
        ),
        (15, 10, 3, 0)
    );
    let [a, b] = long.segments(10);
    assert_eq!((a.position, a.source_row, a.rows), (3, 15, 7));
    assert_eq!((b.position, b.source_row, b.rows), (0, 22, 3));
}

/// A sampler that records what it was told.
#[derive(Debug, Default)]
struct Recorder {
    written: Vec<(RingState, usize, usize)>,
}

impl Sampler for Recorder {
    fn sample(
        &mut self,
        _: &SampleContext<'_>,
        _: usize,
        _: &mut [usize],
        _: &mut [f32],
    ) -> Result<usize> {
        Ok(0)
    }

    fn rows_written(&mut self, before: &RingState, rows: usize, capacity: usize) {
        self.written.push((*before, rows, capacity));
    }
}

/// How a [`TestSink`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Copied,
    Untouched,
    Partial,
}

/// A sink that copies nothing, remembers the plans it saw and fails as told.
struct TestSink {
    schema: Schema,
    outcome: Outcome,
    plans: Vec<WritePlan>,
}

impl RowSink for TestSink {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn copy_rows(&mut self, plan: &WritePlan, _: &[ColumnSlice<'_>]) -> Result<(), CopyError> {
        self.plans.push(*plan);
        let error = || Error::config("test sink", "fails on purpose");
        match self.outcome {
            Outcome::Copied => Ok(()),
            Outcome::Untouched => Err(CopyError::Untouched(error())),
            Outcome::Partial => Err(CopyError::Partial(error())),
        }
    }
}

fn sink(outcome: Outcome) -> TestSink {
    let schema = Schema::new([
        Column::scalar("x", DType::F32),
        Column::scalar("terminated", DType::Bool),
    ])
    .unwrap();
    TestSink {
        schema,
        outcome,
        plans: Vec::new(),
    }
}

/// `rows` rows of `x`, the rows at `ends` ending an episode.
fn rows(rows: usize, ends: &[usize]) -> (Vec<f32>, Vec<Flag>) {
    let x = (0..rows).map(|i| i as f32).collect();
    let flags = (0..rows).map(|i| Flag::new(ends.contains(&i))).collect();
    (x, flags)
}

#[test]
fn the_writer_plans_copies_advances_and_tells_the_sampler_in_that_order() {
    let mut sink = sink(Outcome::Copied);
    let mut writer = RingWriter::new(&sink.schema, 4, RingState::default());
    let mut sampler = Recorder::default();
    let (x, done) = rows(3, &[1]);
    let columns = [ColumnSlice::from(&x), (&done).into()];
    assert_eq!(writer.write(&mut sink, &mut sampler, &columns).unwrap(), 3);
    let (x, done) = rows(6, &[0, 4]);
    let columns = [ColumnSlice::from(&x), (&done).into()];
    assert_eq!(writer.write(&mut sink, &mut sampler, &columns).unwrap(), 6);
    assert_eq!(sink.plans.len(), 2);
    let long = sink.plans[1];
    assert_eq!((long.rows, long.skipped, long.written), (6, 2, 4));
    assert_eq!(
        sampler.written,
        [(RingState::default(), 3, 4), (long.start, 4, 4)]
    );
    let state = writer.state();
    assert_eq!((state.cursor, state.len, state.written), (1, 4, 9));
    // Ends at rows 1 of the first write and 0 and 4 of the second (rows 3 and 7 ever).
    assert_eq!((state.episodes, state.episode_start), (3, 8));
    // An empty write reaches neither the sink nor the sampler.
    let empty = [ColumnSlice::F32(&[]), ColumnSlice::Bool(&[])];
    assert_eq!(writer.write(&mut sink, &mut sampler, &empty).unwrap(), 0);
    assert_eq!((sink.plans.len(), sampler.written.len()), (2, 2));
    assert_eq!(writer.state(), state);
}

#[test]
fn a_refused_or_untouched_write_changes_nothing_and_a_partial_one_drops_what_it_reached() {
    let mut copied = sink(Outcome::Copied);
    let mut writer = RingWriter::new(&copied.schema, 10, RingState::default());
    let mut sampler = Recorder::default();
    let (x, done) = rows(8, &[2]);
    let columns = [ColumnSlice::from(&x), (&done).into()];
    writer.write(&mut copied, &mut sampler, &columns).unwrap();
    let before = writer.state();
    let (x, done) = rows(4, &[]);
    let columns = [ColumnSlice::from(&x), (&done).into()];

    // Refused before the sink sees it.
    let mut refused = sink(Outcome::Copied);
    let nan = [f32::NAN; 4];
    let bad = [ColumnSlice::from(&nan), (&done).into()];
    assert!(writer.write(&mut refused, &mut sampler, &bad).is_err());
    assert!(refused.plans.is_empty());

    let mut untouched = sink(Outcome::Untouched);
    assert!(
        writer
            .write(&mut untouched, &mut sampler, &columns)
            .is_err()
    );
    assert_eq!(untouched.plans.len(), 1);
    assert_eq!(writer.state(), before);
    assert_eq!(
        sampler.written.len(),
        1,
        "the sampler hears only of done writes"
    );

    // Positions 8, 9, 0, 1 may be half written: rows 0 and 1 (the oldest two) are
    // dropped; the counters stay.
    let mut partial = sink(Outcome::Partial);
    assert!(writer.write(&mut partial, &mut sampler, &columns).is_err());
    let after = writer.state();
    assert_eq!((after.cursor, after.len), (8, 6));
    assert_eq!(
        (after.written, after.episodes, after.episode_start),
        (before.written, before.episodes, before.episode_start)
    );
    assert_eq!(sampler.written.len(), 1);
    assert!(writer.check_stored(&[2, 7]).is_ok());
    let err = writer.check_stored(&[2, 1]).unwrap_err();
    assert!(err.to_string().contains("position 1"), "{err}");
}

#[test]
fn stored_indices_count_from_the_oldest_row_and_refuse_the_rest() {
    let schema = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
    let ring = RingState {
        cursor: 2,
        len: 4,
        written: 14,
        ..RingState::default()
    };
    let writer = RingWriter::new(&schema, 5, ring);
    // Stored: positions 3, 4, 0, 1 (oldest first).
    let indices: Vec<_> = [3, 4, 0, 1]
        .iter()
        .map(|&p| writer.stored_index(p).unwrap())
        .collect();
    assert_eq!(indices, [0, 1, 2, 3]);
    for position in [2, 5, usize::MAX / 2] {
        let err = writer.stored_index(position).unwrap_err();
        assert!(
            err.to_string()
                .contains("holds no row (4 rows stored of 5)"),
            "{err}"
        );
    }
    let mut sampler = Recorder::default();
    writer.announce_stored(&mut sampler);
    let empty_before = RingState {
        cursor: 3,
        len: 0,
        ..ring
    };
    assert_eq!(sampler.written, [(empty_before, 4, 5)]);
    let empty = RingWriter::new(&schema, 5, RingState::default());
    let mut sampler = Recorder::default();
    empty.announce_stored(&mut sampler);
    assert!(sampler.written.is_empty());
}

#[test]
fn a_column_of_the_wrong_width_is_named_with_the_write_s_real_row_count() {
    let schema = Schema::new([
        Column::new("obs", DType::F32, &[5]),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::new("next_obs", DType::F32, &[5]),
    ])
    .unwrap();
    // 64 rows of 4-element observations into a schema of 5: obs is the odd one out.
    let obs = vec![0.0f32; 64 * 4];
    let reward = vec![0.0f32; 64];
    let flags = vec![Flag::new(false); 64];
    let next_obs = vec![0.0f32; 64 * 5];
    let columns = [
        ColumnSlice::from(&obs),
        (&reward).into(),
        (&flags).into(),
        (&next_obs).into(),
    ];
    match validate_write(&schema, &columns, NonFinite::Reject) {
        Err(Error::RowMismatch {
            column,
            elements,
            rows,
            per_row,
            expected,
        }) => assert_eq!(
            (column.as_str(), elements, rows, per_row, expected),
            ("obs", 256, 64, 5, 320)
        ),
        other => panic!("{other:?}"),
    }
    // A later column short by one row is named with the rows the others agree on.
    let short = vec![0.0f32; 63];
    let columns = [
        ColumnSlice::from(&next_obs),
        (&short).into(),
        (&flags).into(),
        (&next_obs).into(),
    ];
    let err = validate_write(&schema, &columns, NonFinite::Reject).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("column `reward` was given 63 elements; 64 rows"),
        "{err}"
    );
}
