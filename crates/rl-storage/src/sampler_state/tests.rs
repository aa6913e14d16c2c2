use proptest::prelude::*;

use super::*;
use crate::sampler::{SampleContext, Uniform};

/// A sampler whose state is whatever numbers it holds, read back as `reads` says.
#[derive(Clone, Debug, Default, PartialEq)]
struct Numbers {
    kind: &'static str,
    words: Vec<u64>,
    halves: Vec<u32>,
    reals: Vec<f64>,
    /// How many of the saved `u64`s a load reads back (all of them by default).
    reads: Option<usize>,
}

impl Sampler for Numbers {
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
            kind: self.kind,
            version: 3,
        })
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        out.write_u64(self.words.len() as u64)?;
        out.write_u64(self.halves.len() as u64)?;
        out.write_u64(self.reals.len() as u64)?;
        out.write_u64s(&self.words)?;
        out.write_u32s(&self.halves)?;
        out.write_f64s(&self.reals)?;
        out.write_f64(-0.0)?;
        out.write_bytes(b"end")
    }

    fn load_state(mut self, _: &RingState, _: usize, input: &mut StateReader<'_>) -> Result<Self> {
        let words = input.read_u64()? as usize;
        let (halves, reals) = (input.read_u64()? as usize, input.read_u64()? as usize);
        self.words = vec![0; self.reads.unwrap_or(words)];
        self.halves = vec![0; halves];
        self.reals = vec![0.0; reals];
        input.read_u64s(&mut self.words)?;
        if self.words.len() < words {
            return Ok(self);
        }
        input.read_u32s(&mut self.halves)?;
        input.read_f64s(&mut self.reals)?;
        let zero = input.read_f64()?;
        assert!(zero == 0.0 && zero.is_sign_negative());
        let mut end = [0; 3];
        input.read_bytes(&mut end)?;
        assert_eq!(&end, b"end");
        assert_eq!(input.remaining(), 0);
        Ok(self)
    }
}

fn numbers(words: Vec<u64>, halves: Vec<u32>, reals: Vec<f64>) -> Numbers {
    Numbers {
        kind: "numbers",
        words,
        halves,
        reals,
        reads: None,
    }
}

fn load_into(sampler: Numbers, dir: &Path) -> Result<Numbers> {
    load(sampler, dir, "numbers", &RingState::default(), 1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// What a sampler writes is what it reads back, whatever the lengths (chunk
    /// boundaries included) and values (every f64 bit pattern).
    #[test]
    fn states_round_trip(
        words in proptest::collection::vec(any::<u64>(), 0..1200),
        halves in proptest::collection::vec(any::<u32>(), 0..1200),
        reals in proptest::collection::vec(any::<u64>().prop_map(f64::from_bits), 0..1200),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let saved = numbers(words, halves, reals);
        prop_assert_eq!(save(&saved, dir.path()).unwrap(), Some("numbers"));
        let loaded = load_into(Numbers { kind: "numbers", ..Numbers::default() }, dir.path()).unwrap();
        prop_assert_eq!(&loaded.words, &saved.words);
        prop_assert_eq!(&loaded.halves, &saved.halves);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&loaded.reals), bits(&saved.reals));
        let expected = (FIXED_HEADER + "numbers".len()) as u64
            + 8 * (3 + saved.words.len() + saved.reals.len() + 1) as u64
            + 4 * saved.halves.len() as u64
            + 3;
        prop_assert_eq!(std::fs::metadata(dir.path().join(SAMPLER_FILE)).unwrap().len(), expected);
    }
}

#[test]
fn a_sampler_reading_more_or_less_than_was_saved_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    save(&numbers(vec![1, 2, 3], vec![4], vec![5.0]), dir.path()).unwrap();
    let fewer = Numbers {
        kind: "numbers",
        reads: Some(2),
        ..Numbers::default()
    };
    let err = load_into(fewer, dir.path()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { reason, .. } if reason.contains("left unread")),
        "{err}"
    );
    let more = Numbers {
        kind: "numbers",
        reads: Some(40),
        ..Numbers::default()
    };
    let err = load_into(more, dir.path()).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { reason, .. } if reason.contains("ends")),
        "{err}"
    );
    // The state of another kind of sampler, and of another layout version.
    let other = Numbers {
        kind: "other",
        ..Numbers::default()
    };
    let err = load(
        other.clone(),
        dir.path(),
        "numbers",
        &RingState::default(),
        1,
    );
    assert!(matches!(err, Err(Error::SamplerMismatch { .. })));
    save(&other, dir.path()).unwrap();
    let err = load_into(numbers(vec![], vec![], vec![]), dir.path());
    assert!(matches!(err, Err(Error::Corrupt { .. })), "{err:?}");
}

#[test]
fn kinds_are_short_names() {
    let dir = tempfile::tempdir().unwrap();
    for kind in [
        "",
        "a-kind-name-that-is-far-too-long-to-be-the-name-of-any-kind-of-sampler",
    ] {
        let sampler = Numbers {
            kind,
            ..Numbers::default()
        };
        let err = save(&sampler, dir.path()).unwrap_err();
        assert!(err.to_string().contains("1 to 64 bytes"), "{err}");
    }
    assert!(!dir.path().join(SAMPLER_FILE).exists());
}

fn draws(sampler: &mut Uniform) -> Vec<usize> {
    let context = SampleContext {
        ring: RingState {
            cursor: 0,
            len: 1000,
            written: 1000,
            ..RingState::default()
        },
        capacity: 1000,
        terminated: None,
        truncated: None,
    };
    let (mut indices, mut weights) = (vec![0; 100], vec![0.0; 100]);
    sampler
        .sample(&context, 100, &mut indices, &mut weights)
        .unwrap();
    indices
}

#[test]
fn generators_continue_their_stream_and_an_all_zero_state_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let mut saved = Uniform::new(7);
    draws(&mut saved);
    save(&saved, dir.path()).unwrap();
    let load_uniform = |seed| {
        load(
            Uniform::new(seed),
            dir.path(),
            "uniform",
            &RingState::default(),
            1,
        )
    };
    let mut loaded = load_uniform(8).unwrap();
    assert_eq!(draws(&mut loaded), draws(&mut saved));
    assert_ne!(draws(&mut Uniform::new(8)), draws(&mut saved));
    // Zero the four words and fix the checksum: only the generator check can tell.
    let path = dir.path().join(SAMPLER_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let start = FIXED_HEADER + "uniform".len();
    assert_eq!(bytes.len() - start, 32);
    bytes[start..].fill(0);
    let mut checksum = Checksum::new();
    checksum.update(&bytes[start..]);
    bytes[24..32].copy_from_slice(&checksum.0.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = load_uniform(8).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { reason, .. } if reason.contains("all zeros")),
        "{err}"
    );
}
