//! One checkpoint layout for every trainer, stored as a safetensors file.
//!
//! A [`Checkpoint`] is a list of named networks ([`NetworkState`]: architecture, named
//! tensors, weights and, for trained networks, Adam's state) plus the trainer's own
//! typed state. [`Checkpoint::save`] writes it as one safetensors file:
//!
//! - every network's weights as `f32` tensors named `<network>.<tensor>`, the tensor
//!   names PyTorch gives the equivalent module (`actor.0.weight`, `actor.0.bias`,
//!   `actor.2.weight` ... for an `nn.Sequential` of `Linear` and activation modules), so
//!   `safetensors.torch.load_file` and a prefix filter give a `state_dict`;
//! - Adam's moments as `exp_avg/<network>.<tensor>` and `exp_avg_sq/<network>.<tensor>`
//!   (PyTorch's names for them), outside every network's prefix;
//! - in the header's metadata: `format` (`rl/checkpoint`), `version`, `kind` (the
//!   trainer, e.g. `ppo`), `networks` (JSON: names, typed architectures, tensor layout,
//!   Adam's step counter and configuration), `state` (the trainer's state as JSON) and
//!   one `torch.<network>` line describing the PyTorch module the weights fit;
//! - checksums, CRC-32C as 8 lowercase hex digits: `crc32c.<tensor>` over each tensor's
//!   bytes, and `crc32c` over the whole header without itself (the metadata, the tensor
//!   checksums and safetensors' own tensor names, types, shapes and offsets).
//!
//! The bytes are a function of the checkpoint alone (metadata and tensors in name order),
//! so two saves of the same state are the same file. Files are written atomically (a
//! temporary file in the same directory, flushed, then renamed): a crash leaves the previous file or the new one. Loading checks,
//! before anything is used, that the header is laid out exactly as [`Checkpoint::save`]
//! lays it out and matches its checksum, then the format, version and kind, then every
//! tensor's bytes against its checksum ([`Error::CheckpointChecksum`] names the file and
//! the tensor), then every tensor's presence, type and shape, before anything is handed
//! back; restoring into a network checks its architecture before writing. So a damaged
//! file (any one byte changed, anywhere) is refused, never loaded with other weights.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::{Adam, AdamConfig, AdamState, Architecture, TensorSpec, Weights};

/// One named network in a [`Checkpoint`]: what it is, its weights and (when it is
/// trained) its optimiser's state. A captured state borrows the network's weights and
/// the optimiser's moments; a loaded one owns them.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkState<'a> {
    /// Its name in the checkpoint (`"actor"`, `"critic"`, `"q1_target"` ...).
    pub name: String,
    /// What it is; restoring into a network of another architecture is refused.
    pub architecture: Architecture,
    /// The named tensors its parameters are made of.
    pub tensors: Vec<TensorSpec>,
    /// Its parameters, flat.
    pub params: Cow<'a, [f32]>,
    /// Its Adam's state, for a network that is trained (`None` for targets).
    pub optimizer: Option<AdamState<'a>>,
}

impl<'a> NetworkState<'a> {
    /// `net`'s weights and, if given, `optimizer`'s state, under `name`, borrowed (nothing
    /// the size of the weights is copied: saving a checkpoint streams them from the
    /// network to the file).
    pub fn capture(
        name: impl Into<String>,
        net: &'a dyn Weights,
        optimizer: Option<&'a Adam>,
    ) -> Self {
        Self {
            name: name.into(),
            architecture: net.architecture(),
            tensors: net.tensors(),
            params: Cow::Borrowed(net.params()),
            optimizer: optimizer.map(Adam::state),
        }
    }

    /// The state with its weights and moments copied, independent of the network.
    pub fn into_owned(self) -> NetworkState<'static> {
        NetworkState {
            name: self.name,
            architecture: self.architecture,
            tensors: self.tensors,
            params: Cow::Owned(self.params.into_owned()),
            optimizer: self.optimizer.map(AdamState::into_owned),
        }
    }

    /// Checks that the state fits `net` (same architecture) and `optimizer` (a state is
    /// present exactly when an optimiser is given, and fits it), changing nothing.
    ///
    /// # Errors
    /// [`Error::ArchitectureMismatch`], [`Error::StateMismatch`] or [`Error::Config`].
    pub fn check_fits(&self, net: &dyn Weights, optimizer: Option<&Adam>) -> Result<()> {
        let expected = net.architecture();
        if self.architecture != expected || self.params.len() != net.num_params() {
            return Err(Error::ArchitectureMismatch {
                what: format!("checkpoint network {:?}", self.name),
                expected,
                found: self.architecture.clone(),
            });
        }
        match (&self.optimizer, optimizer) {
            (Some(state), Some(adam)) => adam.check_state(state),
            (None, None) => Ok(()),
            (None, Some(_)) => Err(Error::StateMismatch {
                what: format!("for network {:?} is missing from the checkpoint", self.name),
            }),
            (Some(_), None) => Err(Error::StateMismatch {
                what: format!(
                    "for network {:?} is in the checkpoint but the network is not trained here",
                    self.name
                ),
            }),
        }
    }

    /// Puts the weights into `net` and the state into `optimizer` after
    /// [`NetworkState::check_fits`]: on error neither changes.
    ///
    /// # Errors
    /// As [`NetworkState::check_fits`].
    pub fn restore_into(&self, net: &mut dyn Weights, optimizer: Option<&mut Adam>) -> Result<()> {
        self.check_fits(net, optimizer.as_deref())?;
        net.params_mut().copy_from_slice(&self.params);
        if let (Some(state), Some(adam)) = (&self.optimizer, optimizer) {
            adam.load_state(state)?;
        }
        Ok(())
    }
}

/// What the header says of one network.
#[derive(Serialize, Deserialize)]
struct NetworkHeader {
    name: String,
    architecture: Architecture,
    tensors: Vec<TensorSpec>,
    optimizer: Option<OptimizerHeader>,
}

#[derive(Serialize, Deserialize)]
struct OptimizerHeader {
    t: u64,
    config: AdamConfig,
}

/// Named networks plus a trainer's typed state `S`: the one checkpoint layout of every
/// trainer (see the module documentation for the file).
///
/// ```
/// use rl_nn::{Activation, Adam, AdamConfig, Checkpoint, Init, Mlp, MlpSpec, NetworkState, Weights};
/// use rand::SeedableRng;
///
/// # fn main() -> rl_nn::Result<()> {
/// let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
/// let net = Mlp::new(MlpSpec::new(4, &[16], 2, Activation::Relu), Init::Uniform, &mut rng)?;
/// let adam = Adam::new(net.num_params(), AdamConfig::default())?;
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let path = dir.path().join("run.safetensors");
///
/// let checkpoint = Checkpoint {
///     kind: "example".to_owned(),
///     networks: vec![NetworkState::capture("actor", &net, Some(&adam))],
///     state: 12_345u64, // anything serde writes: counters, RNG states, configs
/// };
/// checkpoint.save(&path)?;
///
/// let mut fresh = Mlp::zeros(net.spec().clone())?;
/// let mut fresh_adam = Adam::new(fresh.num_params(), AdamConfig::default())?;
/// let loaded = Checkpoint::<u64>::load(&path, "example")?;
/// loaded.network("actor")?.restore_into(&mut fresh, Some(&mut fresh_adam))?;
/// assert_eq!(fresh, net);
/// assert_eq!(loaded.state, 12_345);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint<'a, S> {
    /// Which trainer wrote it (`"ppo"`, `"sac"` ...); [`Checkpoint::load`] refuses
    /// another kind with [`Error::CheckpointKind`].
    pub kind: String,
    /// The networks, in the order the trainer saved them.
    pub networks: Vec<NetworkState<'a>>,
    /// The trainer's own state.
    pub state: S,
}

/// The format name in every checkpoint's metadata.
pub const FORMAT: &str = "rl/checkpoint";
/// The format version this build writes and reads; a checkpoint of any other version is
/// refused with [`Error::CheckpointVersion`].
///
/// 3: the learners' seeds moved out of their stored configurations into their states
/// (`SacState::seed`, `DqnState::seed`, `RecurrentState::seed` in `rl-algos`), so a
/// version 2 checkpoint's state no longer reads.
///
/// 4: checksums (CRC-32C) over every tensor and over the header, verified before anything
/// is used; a version 3 file has none and is refused.
pub const VERSION: u32 = 4;

/// The metadata key of the header's checksum.
const HEADER_CHECKSUM: &str = "crc32c";
/// The prefix of each tensor's checksum key: `crc32c.<tensor>`.
const TENSOR_CHECKSUM: &str = "crc32c.";

impl<S> Checkpoint<'_, S> {
    /// The checkpoint with every network's weights and moments copied, independent of
    /// the learner it was captured from.
    pub fn into_owned(self) -> Checkpoint<'static, S> {
        Checkpoint {
            kind: self.kind,
            networks: self
                .networks
                .into_iter()
                .map(NetworkState::into_owned)
                .collect(),
            state: self.state,
        }
    }
}

impl<'a, S: Serialize + DeserializeOwned> Checkpoint<'a, S> {
    /// The network named `name`.
    ///
    /// # Errors
    /// [`Error::CheckpointCorrupt`] if there is none.
    pub fn network(&self, name: &str) -> Result<&NetworkState<'a>> {
        self.networks
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| Error::CheckpointCorrupt {
                what: format!("{} checkpoint", self.kind),
                problem: format!(
                    "it has no network named {name:?} (it has {:?})",
                    self.networks
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                ),
            })
    }

    /// The file's header and its tensors in order, checked; errors as
    /// [`Checkpoint::to_bytes`].
    fn layout(&self) -> Result<Layout<'_>> {
        let corrupt = |problem: String| Error::CheckpointCorrupt {
            what: "checkpoint to save".to_owned(),
            problem,
        };
        let mut tensors: BTreeMap<String, (&[f32], &[usize])> = BTreeMap::new();
        let mut headers = Vec::with_capacity(self.networks.len());
        let mut metadata = BTreeMap::new();
        for net in &self.networks {
            check_layout(net).map_err(corrupt)?;
            let mut parts: Vec<(&str, &[f32])> = vec![("", &net.params)];
            if let Some(adam) = &net.optimizer {
                if adam.first.len() != net.params.len() || adam.second.len() != net.params.len() {
                    return Err(corrupt(format!(
                        "network {:?}: Adam's moments do not match its parameters",
                        net.name
                    )));
                }
                parts.push(("exp_avg/", &adam.first));
                parts.push(("exp_avg_sq/", &adam.second));
            }
            for (prefix, values) in parts {
                for tensor in &net.tensors {
                    let slice = &values[tensor.range()];
                    let name = format!("{prefix}{}.{}", net.name, tensor.name);
                    if let Some((element, &value)) =
                        slice.iter().enumerate().find(|(_, v)| !v.is_finite())
                    {
                        return Err(Error::NonFinite {
                            what: format!("network {:?}", net.name),
                            tensor: name,
                            element,
                            value,
                        });
                    }
                    if tensors
                        .insert(name.clone(), (slice, &tensor.shape))
                        .is_some()
                    {
                        return Err(corrupt(format!("two tensors are named {name:?}")));
                    }
                }
            }
            if let Some(torch) = torch_description(&net.architecture) {
                metadata.insert(format!("torch.{}", net.name), torch);
            }
            headers.push(NetworkHeader {
                name: net.name.clone(),
                architecture: net.architecture.clone(),
                tensors: net.tensors.clone(),
                optimizer: net.optimizer.as_ref().map(|a| OptimizerHeader {
                    t: a.t,
                    config: a.config,
                }),
            });
        }
        let json = |what: &str, value: &dyn erased::Json| {
            value
                .to_json()
                .map_err(|e| corrupt(format!("its {what} cannot be written ({e})")))
        };
        metadata.insert("format".to_owned(), FORMAT.to_owned());
        metadata.insert("version".to_owned(), VERSION.to_string());
        metadata.insert("kind".to_owned(), self.kind.clone());
        metadata.insert("networks".to_owned(), json("networks", &headers)?);
        metadata.insert("state".to_owned(), json("state", &self.state)?);
        Layout::new(metadata, tensors).map_err(corrupt)
    }

    /// The checkpoint as safetensors bytes. The same checkpoint always gives the same
    /// bytes: the header lists the metadata and the tensors sorted by name, and the data
    /// follows in that order.
    ///
    /// # Errors
    /// [`Error::NonFinite`] if a weight or moment is NaN or infinite (training
    /// diverged), [`Error::CheckpointCorrupt`] if a network is inconsistent (tensors that
    /// do not tile its parameters, moments of another length, two tensors of one name) or
    /// `state` cannot be written.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let layout = self.layout()?;
        let mut bytes = Vec::with_capacity(layout.len());
        layout
            .write(&mut bytes)
            .map_err(|e| Error::CheckpointCorrupt {
                what: "checkpoint to save".to_owned(),
                problem: e.to_string(),
            })?;
        Ok(bytes)
    }

    /// Writes the checkpoint to `path` atomically: into a temporary file in the same
    /// directory, flushed to disk, then renamed over `path`. On error `path` is as it was.
    /// The tensors go to the file in blocks of 16 KiB, so saving allocates the header and
    /// nothing the size of the weights (the file's bytes are [`Checkpoint::to_bytes`]).
    ///
    /// # Errors
    /// As [`Checkpoint::to_bytes`], and [`Error::CheckpointIo`] if writing fails.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let layout = self.layout()?;
        write_atomically(path.as_ref(), |file| layout.write(file))
    }

    /// Parses a checkpoint of kind `kind` from bytes; `what` names the source in errors.
    ///
    /// # Errors
    /// As [`Checkpoint::load`].
    pub fn from_bytes(bytes: &[u8], kind: &str, what: &Path) -> Result<Self> {
        let corrupt = |problem: String| Error::CheckpointCorrupt {
            what: what.display().to_string(),
            problem,
        };
        let (header_len, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| corrupt(format!("not a safetensors file ({e})")))?;
        let meta: BTreeMap<String, String> = header
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let damaged = |tensor: Option<String>, problem: &str| Error::CheckpointChecksum {
            path: what.to_owned(),
            tensor,
            problem: problem.to_owned(),
        };
        // The header first, before any of it is believed: a file without a checksum is
        // one of an older version (refused below by its number) or damaged.
        let sealed = meta.contains_key(HEADER_CHECKSUM);
        if sealed {
            check_header(&bytes[8..8 + header_len], &header, &meta)
                .map_err(|problem| damaged(None, problem))?;
        }
        let field = |key: &str| {
            meta.get(key)
                .ok_or_else(|| corrupt(format!("its metadata has no {key:?}")))
        };
        let format = field("format")?;
        if format != FORMAT {
            return Err(corrupt(format!("its format is {format:?}, not {FORMAT:?}")));
        }
        let version: u32 = field("version")?
            .parse()
            .map_err(|_| corrupt("its version is not a number".to_owned()))?;
        if version != VERSION {
            return Err(Error::CheckpointVersion {
                path: what.to_owned(),
                found: version,
                supported: VERSION,
            });
        }
        if !sealed {
            return Err(damaged(None, "it has no checksum"));
        }
        let tensors = SafeTensors::deserialize(bytes)
            .map_err(|e| corrupt(format!("damaged or truncated ({e})")))?;
        // Every tensor's bytes, before any is used.
        let mut names = tensors.names();
        names.sort_unstable();
        for name in names {
            let view = tensors
                .tensor(name)
                .map_err(|e| corrupt(format!("tensor {name:?} does not read ({e})")))?;
            if meta.get(&format!("{TENSOR_CHECKSUM}{name}")) != Some(&checksum(view.data())) {
                return Err(damaged(Some(name.to_owned()), "its data changed"));
            }
        }
        let found_kind = field("kind")?;
        if found_kind != kind {
            return Err(Error::CheckpointKind {
                path: what.to_owned(),
                expected: kind.to_owned(),
                found: found_kind.clone(),
            });
        }
        let headers: Vec<NetworkHeader> = serde_json::from_str(field("networks")?)
            .map_err(|e| corrupt(format!("its network list does not parse ({e})")))?;
        let state: S = serde_json::from_str(field("state")?)
            .map_err(|e| corrupt(format!("its trainer state does not parse ({e})")))?;
        let mut networks = Vec::with_capacity(headers.len());
        for header in headers {
            // Sizes come from the file: check them before allocating anything by them.
            let len = header
                .tensors
                .iter()
                .try_fold(0usize, |total, spec| {
                    let n = spec
                        .shape
                        .iter()
                        .try_fold(1usize, |n, &d| n.checked_mul(d))?;
                    spec.offset.checked_add(n)?;
                    total.checked_add(n)
                })
                .filter(|&len| len <= bytes.len() / 4)
                .ok_or_else(|| {
                    corrupt(format!(
                        "network {:?} claims more values than the file holds",
                        header.name
                    ))
                })?;
            let read = |prefix: &str| -> Result<Vec<f32>> {
                let mut values = vec![0.0; len];
                for spec in &header.tensors {
                    let name = format!("{prefix}{}.{}", header.name, spec.name);
                    let view = tensors
                        .tensor(&name)
                        .map_err(|_| corrupt(format!("tensor {name:?} is missing")))?;
                    if view.dtype() != Dtype::F32 || view.shape() != spec.shape.as_slice() {
                        return Err(corrupt(format!(
                            "tensor {name:?} is {:?} {:?}, not F32 {:?}",
                            view.dtype(),
                            view.shape(),
                            spec.shape
                        )));
                    }
                    let out = values.get_mut(spec.range()).ok_or_else(|| {
                        corrupt(format!("tensor {name:?} lies outside its network"))
                    })?;
                    for (v, b) in out.iter_mut().zip(view.data().chunks_exact(4)) {
                        *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                    // Saving refuses these, so only damage puts them there.
                    let second_moment = prefix == "exp_avg_sq/";
                    if let Some((i, v)) = out
                        .iter()
                        .enumerate()
                        .find(|&(_, &v)| !v.is_finite() || (second_moment && v < 0.0))
                    {
                        return Err(corrupt(format!(
                            "tensor {name:?} holds {v} at element {i}, which no saved \
                             checkpoint holds"
                        )));
                    }
                }
                Ok(values)
            };
            let params = read("")?;
            let optimizer = match &header.optimizer {
                Some(o) => Some(AdamState {
                    t: o.t,
                    first: Cow::Owned(read("exp_avg/")?),
                    second: Cow::Owned(read("exp_avg_sq/")?),
                    config: o.config,
                }),
                None => None,
            };
            let net = NetworkState {
                name: header.name,
                architecture: header.architecture,
                tensors: header.tensors,
                params: Cow::Owned(params),
                optimizer,
            };
            check_layout(&net).map_err(corrupt)?;
            networks.push(net);
        }
        Ok(Self {
            kind: kind.to_owned(),
            networks,
            state,
        })
    }

    /// Reads a checkpoint of kind `kind` written by [`Checkpoint::save`].
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] if there is no file, [`Error::CheckpointIo`] if it
    /// cannot be read, [`Error::CheckpointChecksum`] for a file damaged after it was written
    /// (its header or a tensor does not match its checksum: any one byte changed, anywhere),
    /// [`Error::CheckpointVersion`] for another format version,
    /// [`Error::CheckpointKind`] for a checkpoint of another trainer,
    /// [`Error::CheckpointCorrupt`] for anything else (not safetensors, truncated, a
    /// missing or misshapen tensor, a state of another type).
    pub fn load(path: impl AsRef<Path>, kind: &str) -> Result<Self> {
        let path = path.as_ref();
        Self::from_bytes(&read(path)?, kind, path)
    }
}

/// Exports networks' weights alone (no optimiser state) as a safetensors file of kind
/// `weights`, tensors named `<network>.<tensor>` as in PyTorch.
///
/// # Errors
/// As [`Checkpoint::save`].
pub fn save_weights(path: impl AsRef<Path>, networks: &[(&str, &dyn Weights)]) -> Result<()> {
    Checkpoint {
        kind: "weights".to_owned(),
        networks: networks
            .iter()
            .map(|(name, net)| NetworkState::capture(*name, *net, None))
            .collect(),
        state: (),
    }
    .save(path)
}

/// Loads the network `name` of a file written by [`save_weights`] (or any checkpoint's
/// weights, with `kind`) into `net`, after checking its architecture: on error `net` is
/// unchanged.
///
/// # Errors
/// As [`Checkpoint::load`], and [`Error::ArchitectureMismatch`] for weights of another
/// architecture.
pub fn load_weights(path: impl AsRef<Path>, name: &str, net: &mut dyn Weights) -> Result<()> {
    let path = path.as_ref();
    let checkpoint = Checkpoint::<serde_json::Value>::from_bytes(&read(path)?, "weights", path)?;
    let state = checkpoint.network(name)?;
    let expected = net.architecture();
    if state.architecture != expected {
        return Err(Error::ArchitectureMismatch {
            what: format!("weights file {}, network {name:?}", path.display()),
            expected,
            found: state.architecture.clone(),
        });
    }
    let mut without_optimizer = state.clone();
    without_optimizer.optimizer = None;
    without_optimizer.restore_into(net, None)
}

/// The bytes of the file at `path`, with a typed error for a missing or unreadable one.
fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => Error::CheckpointNotFound {
            path: path.to_owned(),
        },
        _ => Error::CheckpointIo {
            action: "read",
            path: path.to_owned(),
            source,
        },
    })
}

/// One tensor's entry in a safetensors header.
#[derive(Serialize)]
struct TensorEntry<'a> {
    dtype: &'static str,
    shape: &'a [usize],
    data_offsets: (usize, usize),
}

/// A checkpoint file before it is written: safetensors of `f32` tensors and string
/// metadata, in a fixed order (the `safetensors` crate's writer takes its metadata as a
/// `HashMap`, whose order changes from run to run): an 8-byte little-endian header length,
/// the JSON header padded with spaces to a multiple of 8 bytes, then the tensors' data in
/// name order. The tensors are borrowed, never copied: the checksums are computed and the
/// bytes written in blocks ([`le_blocks`]).
struct Layout<'a> {
    /// The sealed, padded JSON header.
    header: Vec<u8>,
    /// The tensors' values, in the order of their data.
    tensors: Vec<&'a [f32]>,
    /// Bytes of data in all.
    data_len: usize,
}

impl<'a> Layout<'a> {
    /// The layout of `tensors` under `metadata`, which gains each tensor's checksum and
    /// the header's ([`sealed_header`]).
    fn new(
        mut metadata: BTreeMap<String, String>,
        tensors: BTreeMap<String, (&'a [f32], &[usize])>,
    ) -> std::result::Result<Self, String> {
        let mut data_len = 0;
        let mut entries = BTreeMap::new();
        let mut values_in_order = Vec::with_capacity(tensors.len());
        for (name, (values, shape)) in &tensors {
            if shape.iter().product::<usize>() != values.len() {
                return Err(format!(
                    "tensor {name:?} has shape {shape:?} but {} values",
                    values.len()
                ));
            }
            let mut crc = 0;
            le_blocks(values, |block| {
                crc = crc32c::crc32c_append(crc, block);
                Ok(())
            })
            .map_err(|e| e.to_string())?;
            metadata.insert(format!("{TENSOR_CHECKSUM}{name}"), format!("{crc:08x}"));
            let start = data_len;
            data_len += 4 * values.len();
            entries.insert(
                name.as_str(),
                TensorEntry {
                    dtype: "F32",
                    shape,
                    data_offsets: (start, data_len),
                },
            );
            values_in_order.push(*values);
        }
        let header = sealed_header(&mut metadata, &entries)?;
        Ok(Self {
            header,
            tensors: values_in_order,
            data_len,
        })
    }

    /// The file's length in bytes.
    fn len(&self) -> usize {
        8 + self.header.len() + self.data_len
    }

    /// Writes the file's bytes to `out`.
    fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&(self.header.len() as u64).to_le_bytes())?;
        out.write_all(&self.header)?;
        for values in &self.tensors {
            le_blocks(values, |block| out.write_all(block))?;
        }
        Ok(())
    }
}

/// Hands `values` to `sink` as little-endian bytes, in blocks of at most 16 KiB (a
/// buffer on the stack: nothing is allocated).
fn le_blocks(values: &[f32], mut sink: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
    const FLOATS: usize = 4096;
    let mut block = [0u8; 4 * FLOATS];
    for chunk in values.chunks(FLOATS) {
        for (bytes, v) in block.chunks_exact_mut(4).zip(chunk) {
            bytes.copy_from_slice(&v.to_le_bytes());
        }
        sink(&block[..4 * chunk.len()])?;
    }
    Ok(())
}

/// The CRC-32C of `bytes` as 8 lowercase hex digits.
fn checksum(bytes: &[u8]) -> String {
    format!("{:08x}", crc32c::crc32c(bytes))
}

/// The JSON header, unpadded.
fn header_json(
    metadata: &BTreeMap<String, String>,
    entries: &BTreeMap<&str, TensorEntry<'_>>,
) -> std::result::Result<Vec<u8>, String> {
    #[derive(Serialize)]
    struct Header<'a> {
        #[serde(rename = "__metadata__")]
        metadata: &'a BTreeMap<String, String>,
        #[serde(flatten)]
        tensors: &'a BTreeMap<&'a str, TensorEntry<'a>>,
    }
    serde_json::to_vec(&Header {
        metadata,
        tensors: entries,
    })
    .map_err(|e| e.to_string())
}

/// Puts the header's checksum into `metadata` (over the header without it, tensor entries
/// included) and gives the header padded with spaces to a multiple of 8 bytes.
fn sealed_header(
    metadata: &mut BTreeMap<String, String>,
    entries: &BTreeMap<&str, TensorEntry<'_>>,
) -> std::result::Result<Vec<u8>, String> {
    metadata.remove(HEADER_CHECKSUM);
    let sum = checksum(&header_json(metadata, entries)?);
    metadata.insert(HEADER_CHECKSUM.to_owned(), sum);
    let mut json = header_json(metadata, entries)?;
    json.resize(json.len().next_multiple_of(8), b' ');
    Ok(json)
}

/// Checks a parsed header against its raw bytes `raw` (padding included) and its
/// checksum: it must be exactly the header [`safetensors_bytes`] writes for what was
/// parsed, so a changed byte anywhere in it (a digit of the state, a shape, an offset, the
/// padding, the length prefix) is found.
fn check_header(
    raw: &[u8],
    header: &safetensors::tensor::Metadata,
    metadata: &BTreeMap<String, String>,
) -> std::result::Result<(), &'static str> {
    let mut entries = BTreeMap::new();
    for (name, info) in header.tensors() {
        if info.dtype != Dtype::F32 {
            return Err("a tensor is not F32");
        }
        entries.insert(name, info);
    }
    let entries: BTreeMap<&str, TensorEntry<'_>> = entries
        .iter()
        .map(|(name, info)| {
            (
                name.as_str(),
                TensorEntry {
                    dtype: "F32",
                    shape: &info.shape,
                    data_offsets: info.data_offsets,
                },
            )
        })
        .collect();
    let mut unsealed = metadata.clone();
    let stored = unsealed.remove(HEADER_CHECKSUM);
    let expected = sealed_header(&mut unsealed, &entries).map_err(|_| "it does not write")?;
    if raw != expected.as_slice() {
        return Err(if stored.as_ref() == unsealed.get(HEADER_CHECKSUM) {
            "it is not laid out as this library writes it"
        } else {
            "its checksum differs"
        });
    }
    Ok(())
}

/// Checks that a network's tensors tile its parameters exactly, in order.
fn check_layout(net: &NetworkState) -> std::result::Result<(), String> {
    let mut next = 0;
    for t in &net.tensors {
        if t.offset != next {
            return Err(format!(
                "network {:?}: tensor {:?} starts at {} instead of {next}",
                net.name, t.name, t.offset
            ));
        }
        next += t.len();
    }
    if next != net.params.len() {
        return Err(format!(
            "network {:?}: its tensors hold {next} values but it has {} parameters",
            net.name,
            net.params.len()
        ));
    }
    Ok(())
}

/// The PyTorch module these weights load into, e.g.
/// `nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))`.
fn torch_description(architecture: &Architecture) -> Option<String> {
    match architecture {
        Architecture::Mlp { sizes, activation } => {
            let layers: Vec<String> = sizes
                .windows(2)
                .map(|p| format!("nn.Linear({}, {})", p[0], p[1]))
                .collect();
            Some(format!(
                "nn.Sequential({})",
                layers.join(&format!(", nn.{}(), ", activation.torch_name()))
            ))
        }
        Architecture::Lstm { input, hidden } => Some(format!("nn.LSTMCell({input}, {hidden})")),
        Architecture::Cnn(spec) => crate::cnn::torch_description(spec),
        Architecture::Tensor { shape } => Some(format!("nn.Parameter(torch.zeros({shape:?}))")),
    }
}

/// Writes what `write` puts into the file to `path` atomically (temporary file, fsync,
/// rename): on error `path` is as it was.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let io = |action: &'static str| {
        move |source: io::Error| Error::CheckpointIo {
            action,
            path: path.to_owned(),
            source,
        }
    };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".checkpoint-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io("create a temporary file for"))?;
    write(tmp.as_file_mut()).map_err(io("write"))?;
    tmp.as_file().sync_all().map_err(io("flush"))?;
    tmp.persist(path).map_err(|e| io("rename into")(e.error))?;
    // Make the rename durable; not every platform can open a directory.
    if let Ok(dir) = fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// JSON writing behind a trait object, so one closure serves every type.
mod erased {
    pub(super) trait Json {
        fn to_json(&self) -> serde_json::Result<String>;
    }

    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> serde_json::Result<String> {
            serde_json::to_string(self)
        }
    }
}

#[cfg(test)]
mod tests;
