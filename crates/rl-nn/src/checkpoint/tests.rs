#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use tempfile::tempdir;

use super::*;
use crate::{Activation, Init, Mlp, MlpSpec, Module, Parameters};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct State {
    steps: u64,
    note: String,
}

fn net(hidden: usize, activation: Activation, seed: u64) -> Mlp {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    Mlp::new(
        MlpSpec::new(4, &[hidden, hidden], 2, activation),
        Init::Uniform,
        &mut rng,
    )
    .unwrap()
}

/// A trained actor (with Adam after a few steps), an untrained target and a tensor.
fn checkpoint() -> (Checkpoint<'static, State>, Mlp, Adam) {
    let mut actor = net(8, Activation::Tanh, 1);
    let mut adam = Adam::new(actor.num_params(), AdamConfig::default()).unwrap();
    let mut ws = actor.workspace(3);
    for _ in 0..3 {
        actor.forward(&[0.1; 12], 3, &mut ws).unwrap();
        let mut grads = vec![0.0; actor.num_params()];
        actor
            .backward(&mut ws, &[1.0; 6], Some(&mut grads), None)
            .unwrap();
        adam.update(actor.params_mut(), &grads).unwrap();
    }
    let target = net(8, Activation::Tanh, 2);
    let log_std = Parameters::filled(vec![2], -0.5).unwrap();
    let checkpoint = Checkpoint {
        kind: "test".to_owned(),
        networks: vec![
            NetworkState::capture("actor", &actor, Some(&adam)).into_owned(),
            NetworkState::capture("actor_target", &target, None).into_owned(),
            NetworkState::capture("log_std", &log_std, None).into_owned(),
        ],
        state: State {
            steps: 42,
            note: "hello".to_owned(),
        },
    };
    (checkpoint, actor, adam)
}

#[test]
fn round_trip_through_a_file_is_exact() {
    let (checkpoint, actor, adam) = checkpoint();
    let dir = tempdir().unwrap();
    let path = dir.path().join("c.safetensors");
    checkpoint.save(&path).unwrap();
    let loaded = Checkpoint::<State>::load(&path, "test").unwrap();
    assert_eq!(loaded, checkpoint);
    let mut fresh = Mlp::zeros(actor.spec().clone()).unwrap();
    let mut fresh_adam = Adam::new(
        fresh.num_params(),
        AdamConfig {
            lr: 1.0,
            ..AdamConfig::default()
        },
    )
    .unwrap();
    loaded
        .network("actor")
        .unwrap()
        .restore_into(&mut fresh, Some(&mut fresh_adam))
        .unwrap();
    assert_eq!(fresh, actor);
    assert_eq!(fresh_adam.state(), adam.state());
    assert!(loaded.network("critic").is_err());
}

#[test]
fn tensors_carry_pytorch_names_and_shapes() {
    let (checkpoint, _, _) = checkpoint();
    let bytes = checkpoint.to_bytes().unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let weight = file.tensor("actor.0.weight").unwrap();
    assert_eq!(weight.shape(), [8, 4]);
    assert_eq!(weight.dtype(), Dtype::F32);
    assert_eq!(file.tensor("actor.4.bias").unwrap().shape(), [2]);
    assert_eq!(file.tensor("log_std.value").unwrap().shape(), [2]);
    assert!(file.tensor("exp_avg/actor.2.weight").is_ok());
    assert!(
        file.tensor("exp_avg/actor_target.2.weight").is_err(),
        "targets have no optimiser"
    );
    // The first weight's values, as PyTorch would read them (little-endian f32).
    let first = f32::from_le_bytes(weight.data()[..4].try_into().unwrap());
    assert_eq!(first, checkpoint.networks[0].params[0]);
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().unwrap();
    assert_eq!(
        meta["torch.actor"],
        "nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))"
    );
}

#[test]
fn the_same_state_always_gives_the_same_bytes() {
    let (saved, _, _) = checkpoint();
    let first = saved.to_bytes().unwrap();
    // A separately built copy and a save through a file give the same bytes: nothing in
    // the header depends on a map's iteration order.
    let (again, _, _) = checkpoint();
    assert_eq!(again.to_bytes().unwrap(), first);
    let dir = tempdir().unwrap();
    let (a, b) = (
        dir.path().join("a.safetensors"),
        dir.path().join("b.safetensors"),
    );
    saved.save(&a).unwrap();
    again.save(&b).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(std::fs::read(&a).unwrap(), first);
    // The header is a safetensors header: 8-byte aligned, metadata and tensors readable.
    let header_len = u64::from_le_bytes(first[..8].try_into().unwrap()) as usize;
    assert_eq!(header_len % 8, 0);
    let file = SafeTensors::deserialize(&first).unwrap();
    // The actor's 6 tensors with both moments, the target's 6, the log-std.
    assert_eq!(file.len(), 6 * 3 + 6 + 1);
    // A different state gives different bytes.
    let mut other = saved.clone();
    other.state.steps += 1;
    assert_ne!(other.to_bytes().unwrap(), first);
}

#[test]
fn another_architecture_is_refused_and_the_network_is_untouched() {
    let (checkpoint, _, _) = checkpoint();
    for mut other in [net(8, Activation::Relu, 5), net(16, Activation::Tanh, 5)] {
        let before = other.clone();
        let mut adam = Adam::new(other.num_params(), AdamConfig::default()).unwrap();
        let err = checkpoint
            .network("actor")
            .unwrap()
            .restore_into(&mut other, Some(&mut adam))
            .unwrap_err();
        assert!(matches!(err, Error::ArchitectureMismatch { .. }), "{err}");
        assert_eq!(other, before);
        assert_eq!(adam.steps(), 0);
    }
    // An optimiser where the checkpoint has none, and the reverse.
    let mut target = net(8, Activation::Tanh, 6);
    let before = target.clone();
    let mut adam = Adam::new(target.num_params(), AdamConfig::default()).unwrap();
    assert!(
        checkpoint
            .network("actor_target")
            .unwrap()
            .restore_into(&mut target, Some(&mut adam))
            .is_err()
    );
    assert!(
        checkpoint
            .network("actor")
            .unwrap()
            .restore_into(&mut target, None)
            .is_err()
    );
    assert_eq!(target, before);
}

#[test]
fn weights_files_load_by_name_and_refuse_other_architectures() {
    let dir = tempdir().unwrap();
    let path = dir.path().join("policy.safetensors");
    let (actor, critic) = (net(8, Activation::Relu, 1), net(8, Activation::Relu, 2));
    save_weights(&path, &[("actor", &actor), ("critic", &critic)]).unwrap();
    let mut fresh = net(8, Activation::Relu, 3);
    load_weights(&path, "critic", &mut fresh).unwrap();
    assert_eq!(fresh, critic);
    let mut tanh = net(8, Activation::Tanh, 3);
    let before = tanh.clone();
    let err = load_weights(&path, "actor", &mut tanh).unwrap_err();
    assert!(matches!(err, Error::ArchitectureMismatch { .. }), "{err}");
    assert_eq!(tanh, before);
    assert!(matches!(
        load_weights(dir.path().join("none"), "actor", &mut tanh),
        Err(Error::CheckpointNotFound { .. })
    ));
}

fn load_err(path: &Path, kind: &str) -> Error {
    Checkpoint::<State>::load(path, kind).unwrap_err()
}

#[test]
fn damaged_truncated_or_foreign_files_are_typed_errors() {
    let (checkpoint, _, _) = checkpoint();
    let dir = tempdir().unwrap();
    let path = dir.path().join("c.safetensors");
    checkpoint.save(&path).unwrap();
    assert!(matches!(
        load_err(&path, "ppo"),
        Error::CheckpointKind { .. }
    ));
    let bytes = std::fs::read(&path).unwrap();
    for cut in [0, 7, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        assert!(
            matches!(load_err(&path, "test"), Error::CheckpointCorrupt { .. }),
            "cut at {cut}"
        );
    }
    // A damaged header length (the first 8 bytes) and damaged JSON.
    let mut damaged = bytes.clone();
    damaged[7] = 0xff;
    std::fs::write(&path, &damaged).unwrap();
    assert!(matches!(
        load_err(&path, "test"),
        Error::CheckpointCorrupt { .. }
    ));
    let mut damaged = bytes.clone();
    damaged[12] = b'!';
    std::fs::write(&path, &damaged).unwrap();
    assert!(matches!(
        load_err(&path, "test"),
        Error::CheckpointCorrupt { .. }
    ));
    // Another version, older or newer, is refused by its number: a file written with it
    // (checksums that fit), or one of version 3, which has no checksums.
    assert_eq!(VERSION, 4);
    let needle = format!("\"version\":\"{VERSION}\"");
    let needle = needle.as_bytes();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    for (digit, found) in [(b'2', 2), (b'9', 9)] {
        let mut other = bytes.clone();
        other[at + needle.len() - 2] = digit;
        std::fs::write(&path, &other).unwrap();
        // The digit changed in place is damage: the header's checksum no longer fits.
        match load_err(&path, "test") {
            Error::CheckpointChecksum { tensor: None, .. } => {}
            other => panic!("{other}"),
        }
        std::fs::write(&path, resealed(&other, |_| {}).unwrap()).unwrap();
        match load_err(&path, "test") {
            Error::CheckpointVersion {
                found: f,
                supported,
                ..
            } => assert_eq!((f, supported), (found, VERSION)),
            other => panic!("{other}"),
        }
    }
    let version_3 = resealed(&bytes, |meta| {
        meta.insert("version".to_owned(), "3".to_owned());
    })
    .unwrap();
    let version_3 = with_header_replaced(&version_3, "\"crc32c\":", "\"unsealed\":");
    std::fs::write(&path, &version_3).unwrap();
    match load_err(&path, "test") {
        Error::CheckpointVersion {
            found: 3,
            supported: VERSION,
            ..
        } => {}
        other => panic!("{other}"),
    }
    // This version without its checksum is damaged.
    let unsealed = with_header_replaced(&bytes, "\"crc32c\":", "\"unsealed\":");
    std::fs::write(&path, &unsealed).unwrap();
    match load_err(&path, "test") {
        Error::CheckpointChecksum { tensor: None, .. } => {}
        other => panic!("{other}"),
    }
    assert!(matches!(
        load_err(&dir.path().join("missing"), "test"),
        Error::CheckpointNotFound { .. }
    ));
}

#[test]
fn non_finite_values_are_refused_and_the_old_file_stays() {
    let (good, _, _) = checkpoint();
    let dir = tempdir().unwrap();
    let path = dir.path().join("c.safetensors");
    good.save(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut bad = good.clone();
    bad.networks[0].params.to_mut()[5] = f32::NAN;
    assert!(matches!(
        bad.save(&path),
        Err(Error::NonFinite { element: 5, .. })
    ));
    let mut bad = good;
    if let Some(adam) = &mut bad.networks[0].optimizer {
        adam.second.to_mut()[0] = f32::INFINITY;
    }
    assert!(matches!(bad.save(&path), Err(Error::NonFinite { .. })));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left behind"
    );
}

/// A checkpoint whose JSON header says `to` where it said `from`, length prefix fixed.
fn with_header_replaced(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
    assert!(header.contains(from), "{header}");
    let header = header.replacen(from, to, 1);
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&bytes[8 + header_len..]);
    out
}

#[test]
fn absurd_sizes_in_the_header_are_corrupt_not_an_allocation() {
    let (checkpoint, _, _) = checkpoint();
    let bytes = checkpoint.to_bytes().unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
    for shape in ["[8,4]", "[4,8]"] {
        let from = format!("\\\"shape\\\":{shape}");
        if !header.contains(&from) {
            continue;
        }
        for huge in [
            "[4294967296,4294967296]",
            "[18446744073709551615,2]",
            "[1000000000,1000]",
        ] {
            let to = format!("\\\"shape\\\":{huge}");
            let damaged = with_header_replaced(&bytes, &from, &to);
            let err =
                Checkpoint::<State>::from_bytes(&damaged, "test", Path::new("huge")).unwrap_err();
            assert!(
                matches!(err, Error::CheckpointChecksum { tensor: None, .. }),
                "{err:?}"
            );
            // With checksums that fit, the sizes themselves are refused.
            let damaged = resealed(&damaged, |_| {}).unwrap();
            let err =
                Checkpoint::<State>::from_bytes(&damaged, "test", Path::new("huge")).unwrap_err();
            assert!(matches!(err, Error::CheckpointCorrupt { .. }), "{err:?}");
        }
        return;
    }
    panic!("no shape [8,4] in the header");
}

/// `bytes` (a safetensors file) with its metadata edited by `edit`, then every checksum
/// recomputed to fit, the way a writer that meant it would: for testing what lies behind
/// the checksums. `None` if the header does not parse.
fn resealed(bytes: &[u8], edit: impl FnOnce(&mut BTreeMap<String, String>)) -> Option<Vec<u8>> {
    let (header_len, header) = SafeTensors::read_metadata(bytes).ok()?;
    let data = &bytes[8 + header_len..];
    let mut metadata: BTreeMap<String, String> = header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    edit(&mut metadata);
    let infos = header.tensors();
    let mut entries = BTreeMap::new();
    for (name, info) in &infos {
        let (start, end) = info.data_offsets;
        metadata.insert(
            format!("{TENSOR_CHECKSUM}{name}"),
            checksum(&data[start..end]),
        );
        entries.insert(
            name.as_str(),
            TensorEntry {
                dtype: "F32",
                shape: &info.shape,
                data_offsets: info.data_offsets,
            },
        );
    }
    let json = sealed_header(&mut metadata, &entries).ok()?;
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(data);
    Some(out)
}

#[test]
fn the_header_and_every_tensor_carry_a_checksum() {
    let (checkpoint, _, _) = checkpoint();
    let bytes = checkpoint.to_bytes().unwrap();
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap();
    let names = header.tensors();
    assert!(names.len() > 3);
    for name in names.keys() {
        let sum = &meta[&format!("crc32c.{name}")];
        assert_eq!(sum.len(), 8, "{sum}");
        assert!(sum.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    assert_eq!(meta["crc32c"].len(), 8);
    // Resealing an intact file changes nothing: the same checksums.
    assert_eq!(resealed(&bytes, |_| {}).unwrap(), bytes);
}

/// Loads `bytes`; the error if it is refused, `None` if it loads.
fn refusal(bytes: &[u8]) -> Option<Error> {
    Checkpoint::<State>::from_bytes(bytes, "test", Path::new("flipped.safetensors")).err()
}

#[test]
fn every_single_bit_flip_anywhere_is_refused() {
    let (checkpoint, _, _) = checkpoint();
    let bytes = checkpoint.to_bytes().unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let infos = header.tensors();
    let mut flipped = bytes.clone();
    let mut tensors_named = 0;
    for at in 0..bytes.len() {
        for bit in 0..8 {
            flipped[at] ^= 1 << bit;
            let Some(err) = refusal(&flipped) else {
                panic!("a flip of bit {bit} of byte {at} loads");
            };
            flipped[at] ^= 1 << bit;
            // A damaged tensor is named, with the file: the tensor that holds the byte.
            if at >= 8 + header_len {
                let message = err.to_string();
                match err {
                    Error::CheckpointChecksum {
                        tensor: Some(tensor),
                        path,
                        ..
                    } => {
                        assert_eq!(path, Path::new("flipped.safetensors"));
                        assert!(message.contains(&format!("{tensor:?}")), "{message}");
                        assert!(message.contains("flipped.safetensors"), "{message}");
                        let (start, end) = infos[&tensor].data_offsets;
                        assert!((start..end).contains(&(at - 8 - header_len)));
                        tensors_named += 1;
                    }
                    other => panic!("byte {at} bit {bit}: {other}"),
                }
            }
        }
    }
    assert_eq!(tensors_named, 8 * (bytes.len() - 8 - header_len));
}

/// One damage done to a checkpoint's bytes.
#[derive(Clone, Debug)]
enum Damage {
    /// Set the byte at (position modulo the length) to a value.
    Set(usize, u8),
    /// Keep only the first (position modulo the length) bytes.
    Truncate(usize),
    /// Append bytes.
    Append(Vec<u8>),
}

fn damage() -> impl proptest::strategy::Strategy<Value = Damage> {
    use proptest::prelude::*;
    prop_oneof![
        8 => (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Damage::Set(at, value)),
        1 => any::<usize>().prop_map(Damage::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 1..64).prop_map(Damage::Append),
    ]
}

/// Loads `bytes` as a checkpoint and, when it parses, restores each of its networks into
/// a network of the saved shape: a typed error or a usable result, never a panic.
fn load_and_use(bytes: &[u8]) {
    let Ok(loaded) = Checkpoint::<State>::from_bytes(bytes, "test", Path::new("fuzzed")) else {
        return;
    };
    let mut actor = net(8, Activation::Tanh, 9);
    let mut adam = Adam::new(actor.num_params(), AdamConfig::default()).unwrap();
    if let Ok(state) = loaded.network("actor") {
        let before = actor.params().to_vec();
        match state.restore_into(&mut actor, Some(&mut adam)) {
            // A restored network computes: its weights are finite numbers.
            Ok(()) => assert!(actor.params().iter().all(|w| w.is_finite())),
            // Nothing changes on error.
            Err(_) => assert_eq!(actor.params(), &before[..]),
        }
    }
    let mut log_std = Parameters::filled(vec![2], 0.0).unwrap();
    if let Ok(state) = loaded.network("log_std") {
        let _ = state.restore_into(&mut log_std, None);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Random bytes and damaged checkpoints: never a panic, always a typed error or a
    /// checkpoint that restores (or refuses to) cleanly.
    #[test]
    fn damaged_and_random_bytes_never_panic(
        damages in proptest::collection::vec(damage(), 1..6),
        random in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        header_sets in proptest::collection::vec(
            (proptest::prelude::any::<usize>(), proptest::sample::select(b"0123456789[],-.e".to_vec())),
            1..4,
        ),
        nan_at in proptest::prelude::any::<usize>(),
    ) {
        load_and_use(&random);
        let (checkpoint, _, _) = checkpoint();
        let pristine = checkpoint.to_bytes().unwrap();
        let header_len = u64::from_le_bytes(pristine[..8].try_into().unwrap()) as usize;
        // Characters of the JSON header (sizes, shapes, offsets, the trainer state)
        // changed into other JSON characters: damage that still parses as JSON.
        let mut bytes = pristine.clone();
        for &(at, value) in &header_sets {
            bytes[8 + at % header_len] = value;
        }
        load_and_use(&bytes);
        // The same behind checksums that fit, so the checks behind them run.
        if let Some(bytes) = resealed(&bytes, |_| {}) {
            load_and_use(&bytes);
        }
        // One stored value turned into NaN.
        let mut bytes = pristine.clone();
        let data = bytes.len() - (8 + header_len);
        let at = 8 + header_len + (nan_at % (data / 4)) * 4;
        bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let err = Checkpoint::<State>::from_bytes(&bytes, "test", Path::new("nan")).unwrap_err();
        proptest::prop_assert!(
            matches!(err, Error::CheckpointChecksum { tensor: Some(_), .. }),
            "{}",
            err
        );
        // Behind checksums that fit (a writer that saved a NaN), the value is refused.
        let bytes = resealed(&bytes, |_| {}).unwrap();
        let err = Checkpoint::<State>::from_bytes(&bytes, "test", Path::new("nan")).unwrap_err();
        proptest::prop_assert!(err.to_string().contains("NaN"), "{}", err);
        let mut bytes = pristine.clone();
        for damage in damages {
            match damage {
                Damage::Set(at, value) if !bytes.is_empty() => {
                    let at = at % bytes.len();
                    bytes[at] = value;
                }
                Damage::Set(..) => {}
                Damage::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
                Damage::Append(tail) => bytes.extend(tail),
            }
        }
        load_and_use(&bytes);
        // A header length prefix pointing anywhere.
        let mut long = checkpoint.to_bytes().unwrap();
        long[..8].copy_from_slice(&(random.len() as u64 * 977).to_le_bytes());
        load_and_use(&long);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// One byte changed to any other value, or one bit flipped, anywhere in a saved
    /// checkpoint: always refused, never loaded, never a panic.
    #[test]
    fn one_damaged_byte_or_bit_anywhere_is_refused(
        at in proptest::prelude::any::<usize>(),
        xor in 1u8..=255,
        bit in 0u8..8,
    ) {
        let (checkpoint, _, _) = checkpoint();
        let pristine = checkpoint.to_bytes().unwrap();
        let at = at % pristine.len();
        let mut bytes = pristine.clone();
        bytes[at] ^= xor;
        proptest::prop_assert!(refusal(&bytes).is_some(), "byte {} ^ {:#x} loads", at, xor);
        let mut bytes = pristine;
        bytes[at] ^= 1 << bit;
        proptest::prop_assert!(refusal(&bytes).is_some(), "byte {} bit {} loads", at, bit);
    }
}
