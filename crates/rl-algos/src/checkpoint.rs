//! Checkpoints that resume training exactly: network weights, the optimiser's state and
//! whatever else a trainer needs, in one file written atomically.
//!
//! - [`NetWeights`]: the trainable tensors of a dfdx model with their shapes, in the order
//!   [`TensorCollection::iter_tensors`] visits them (the order of [`AdamState`]'s moments).
//!   [`NetWeights::load_into`] checks the number of tensors and every shape against the
//!   model **before** writing anything, so loading a checkpoint of another architecture
//!   is a typed error that leaves the model as it was (dfdx 0.13's `load_safetensors`
//!   writes tensor by tensor and reports a mismatch only then, leaving a half-loaded
//!   model).
//! - [`Checkpoint`]: weights, [`AdamState`] and a trainer-defined `extra` (normalisation
//!   statistics, RNG state, counters ...), saved with [`Checkpoint::save`] and read back
//!   with [`Checkpoint::load`].
//!
//! See [`Checkpoint`] for the file format, its size and the guarantees of saving and
//! loading.

use std::{
    convert::Infallible,
    fs,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use dfdx::{
    nn::tensor_collection::{
        RecursiveWalker, TensorCollection, TensorOptions, TensorVisitor, ViewTensorMut,
        ViewTensorRef,
    },
    shapes::{HasShape, Shape},
    tensor::{Cpu, Tensor},
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{
    error::{Error, Result},
    optim::{Adam, AdamState},
};

/// The trainable tensors of a dfdx model, with their shapes, in the model's visiting order
/// ([`TensorCollection::iter_tensors`], the order of [`AdamState`]'s moments).
///
/// `tensors[i]` holds `shapes[i].iter().product()` values in row-major order.
///
/// Only trainable tensors are saved, so models with tensors dfdx does not update from
/// gradients (batch-norm running statistics) are refused by [`NetWeights::from_net`] and
/// [`NetWeights::load_into`]: a checkpoint without them would not resume exactly. The
/// policies of this crate have none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetWeights {
    /// The values of each tensor, row-major.
    pub tensors: Vec<Vec<f32>>,
    /// The shape of each tensor.
    pub shapes: Vec<Vec<usize>>,
}

impl NetWeights {
    /// A copy of every trainable tensor of `net`.
    ///
    /// # Errors
    /// [`Error::Config`] if `net` holds a tensor that is not trainable (batch-norm running
    /// statistics), which these weights could not restore.
    pub fn from_net<M: TensorCollection<f32, Cpu>>(net: &M) -> Result<Self> {
        let mut gather = Gather {
            weights: NetWeights {
                tensors: Vec::new(),
                shapes: Vec::new(),
            },
            frozen: None,
        };
        walk(net, &mut gather)?;
        if let Some(tensor) = gather.frozen {
            return Err(frozen_error(tensor));
        }
        Ok(gather.weights)
    }

    /// Number of tensors.
    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Number of values over all tensors.
    pub fn num_params(&self) -> usize {
        self.tensors.iter().map(Vec::len).sum()
    }

    /// Checks that these weights are consistent (as many shapes as tensors, each tensor's
    /// length its shape's product) and fit `net`: the same number of trainable tensors,
    /// each of the same shape. Changes nothing.
    ///
    /// # Errors
    /// [`Error::CheckpointCorrupt`] for inconsistent weights,
    /// [`Error::CheckpointTensorCount`] or [`Error::CheckpointShape`] (naming the first
    /// tensor that differs, with both shapes) for weights of another architecture,
    /// [`Error::Config`] for a model with non-trainable tensors.
    pub fn check_fits<M: TensorCollection<f32, Cpu>>(&self, net: &M) -> Result<()> {
        self.check_consistent("in memory")?;
        let mut check = Check {
            shapes: &self.shapes,
            next: 0,
            mismatch: None,
            frozen: None,
        };
        walk(net, &mut check)?;
        if let Some(tensor) = check.frozen {
            return Err(frozen_error(tensor));
        }
        if check.next != self.shapes.len() {
            return Err(Error::CheckpointTensorCount {
                expected: check.next,
                actual: self.shapes.len(),
            });
        }
        if let Some((tensor, expected)) = check.mismatch {
            return Err(Error::CheckpointShape {
                tensor,
                expected,
                actual: self.shapes[tensor].clone(),
            });
        }
        Ok(())
    }

    /// Writes these weights into `net`, after checking everything
    /// ([`NetWeights::check_fits`]): on error `net` is untouched.
    ///
    /// # Errors
    /// As [`NetWeights::check_fits`].
    pub fn load_into<M: TensorCollection<f32, Cpu>>(&self, net: &mut M) -> Result<()> {
        self.check_fits(net)?;
        self.write_unchecked(net)
    }

    /// Writes into `net`, which [`NetWeights::check_fits`] accepted.
    fn write_unchecked<M: TensorCollection<f32, Cpu>>(&self, net: &mut M) -> Result<()> {
        let mut write = Scatter {
            tensors: &self.tensors,
            next: 0,
        };
        let walked: std::result::Result<_, Infallible> = M::iter_tensors(&mut RecursiveWalker {
            m: net,
            f: &mut write,
        });
        match walked {
            Ok(_) => Ok(()),
            Err(never) => match never {},
        }
    }

    /// Checks that there are as many shapes as tensors and every tensor's length is its
    /// shape's product; `what` names the checkpoint in the error.
    fn check_consistent(&self, what: &str) -> Result<()> {
        let corrupt = |problem: String| Error::CheckpointCorrupt {
            what: what.to_owned(),
            problem,
        };
        if self.tensors.len() != self.shapes.len() {
            return Err(corrupt(format!(
                "the weights hold {} tensors but {} shapes",
                self.tensors.len(),
                self.shapes.len()
            )));
        }
        for (tensor, (values, shape)) in self.tensors.iter().zip(&self.shapes).enumerate() {
            let elements = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
            if elements != Some(values.len()) {
                return Err(corrupt(format!(
                    "weight tensor {tensor} has {} values but shape {shape:?}",
                    values.len()
                )));
            }
        }
        Ok(())
    }
}

/// Everything needed to resume training: the network's weights, the optimiser's state and
/// `extra`, whatever else the trainer needs (normalisation statistics, RNG state,
/// counters), any type serde can write and read.
///
/// Build it with [`Checkpoint::capture`] (or [`Checkpoint::new`]), write it with
/// [`Checkpoint::save`], read it with [`Checkpoint::load`] and put it back with
/// [`Checkpoint::restore_into`].
///
/// # File format
///
/// One JSON object (`serde_json`, with the workspace's `float_roundtrip` feature, so every
/// `f32` reads back bit for bit):
///
/// ```text
/// {"format":"rl-algos/checkpoint","version":1,
///  "weights":{"tensors":[[...],...],"shapes":[[64,4],...]},
///  "optimizer":{"t":..,"first":[[...],...],"second":[[...],...],"config":{...}},
///  "extra":...}
/// ```
///
/// Size: about 12 bytes per float, three floats per parameter (the weight and its two
/// Adam moments): 0.33 MB for PPO's CartPole policy (4-64-64-2 actor and 4-64-64-1
/// critic, 9155 parameters, measured by a test), about 3.6 MB for 100k parameters.
/// Reading parses the whole file in memory. JSON has no NaN or infinity:
/// [`Checkpoint::save`] refuses a checkpoint holding one ([`Error::CheckpointNonFinite`]:
/// training diverged) rather than write a file that would not load. It cannot see inside
/// `extra`: keep NaN and infinities out of it too (serde_json writes them as `null`, and
/// [`Checkpoint::load`] then reports the file as corrupt).
///
/// [`Checkpoint::save`] writes a temporary file in the target's directory, flushes it to
/// disk and renames it over the target: a crash leaves the previous checkpoint or the new
/// one, never a partial file (the file is created readable and writable by its owner
/// only, mode 0600 on Unix). [`Checkpoint::load`] checks the format name and version
/// first, then that the content is consistent (every tensor's length is its shape's
/// product, the moments match the weights), with a typed error for each failure.
///
/// # Example
///
/// ```
/// use rl_algos::{ActorCritic, Adam, AdamConfig, CategoricalPolicy, Checkpoint, PolicyConfig};
///
/// # fn main() -> rl_algos::Result<()> {
/// let policy = CategoricalPolicy::<4, 16, 2>::new(PolicyConfig::new(), 1)?;
/// let adam = Adam::new(policy.net(), AdamConfig::default())?;
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let path = dir.path().join("ppo.ckpt.json");
///
/// // `extra`: anything serde can write, here an env-step counter.
/// Checkpoint::capture(policy.net(), &adam, 12_345u64)?.save(&path)?;
///
/// // Resume: another policy and optimiser of the same type.
/// let mut resumed = CategoricalPolicy::<4, 16, 2>::new(PolicyConfig::new(), 2)?;
/// let mut resumed_adam = Adam::new(resumed.net(), AdamConfig::default())?;
/// let checkpoint = Checkpoint::<u64>::load(&path)?;
/// checkpoint.restore_into(resumed.net_mut(), &mut resumed_adam)?;
/// assert_eq!(checkpoint.extra, 12_345);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint<E> {
    /// [`Checkpoint::FORMAT`]; [`Checkpoint::load`] refuses anything else.
    pub format: String,
    /// [`Checkpoint::VERSION`]; [`Checkpoint::load`] refuses anything else.
    pub version: u32,
    /// The network's trainable tensors.
    pub weights: NetWeights,
    /// The optimiser's moments, step counter and configuration.
    pub optimizer: AdamState,
    /// The trainer's own state.
    pub extra: E,
}

/// The fields [`Checkpoint::load`] reads first.
#[derive(Deserialize)]
struct Header {
    format: Option<String>,
    version: Option<u32>,
}

impl<E: Serialize + DeserializeOwned> Checkpoint<E> {
    /// The format name written in every checkpoint.
    pub const FORMAT: &'static str = "rl-algos/checkpoint";
    /// The format version this build writes and reads.
    pub const VERSION: u32 = 1;

    /// A checkpoint of the current format and version.
    pub fn new(weights: NetWeights, optimizer: AdamState, extra: E) -> Self {
        Self {
            format: Self::FORMAT.to_owned(),
            version: Self::VERSION,
            weights,
            optimizer,
            extra,
        }
    }

    /// A checkpoint of `net`'s weights, `optimizer`'s state and `extra`.
    ///
    /// # Errors
    /// As [`NetWeights::from_net`].
    pub fn capture<M: TensorCollection<f32, Cpu>>(
        net: &M,
        optimizer: &Adam<M>,
        extra: E,
    ) -> Result<Self> {
        Ok(Self::new(
            NetWeights::from_net(net)?,
            optimizer.state(),
            extra,
        ))
    }

    /// Puts the weights into `net` and the optimiser state into `optimizer`, after
    /// checking both: on error neither is changed. `extra` is the caller's to restore.
    ///
    /// # Errors
    /// As [`NetWeights::check_fits`] and [`Adam::load_state`].
    pub fn restore_into<M: TensorCollection<f32, Cpu>>(
        &self,
        net: &mut M,
        optimizer: &mut Adam<M>,
    ) -> Result<()> {
        self.weights.check_fits(net)?;
        // Checks everything before changing anything.
        optimizer.load_state(self.optimizer.clone())?;
        self.weights.write_unchecked(net)
    }

    /// Checks that the checkpoint is consistent: weights as [`NetWeights::check_fits`]
    /// says without a model, and as many first and second moments as weight tensors, each
    /// as long as its tensor. `what` names the checkpoint in errors.
    fn check_consistent(&self, what: &str) -> Result<()> {
        self.weights.check_consistent(what)?;
        for (part, moments) in [
            ("first-moment", &self.optimizer.first),
            ("second-moment", &self.optimizer.second),
        ] {
            let corrupt = |problem: String| Error::CheckpointCorrupt {
                what: what.to_owned(),
                problem,
            };
            if moments.len() != self.weights.tensors.len() {
                return Err(corrupt(format!(
                    "the optimiser holds {} {part} tensors but the weights {}",
                    moments.len(),
                    self.weights.tensors.len()
                )));
            }
            for (tensor, (m, w)) in moments.iter().zip(&self.weights.tensors).enumerate() {
                if m.len() != w.len() {
                    return Err(corrupt(format!(
                        "{part} tensor {tensor} has {} values but its weight tensor {}",
                        m.len(),
                        w.len()
                    )));
                }
            }
        }
        Ok(())
    }

    /// The first NaN or infinite value, as an error.
    fn check_finite(&self) -> Result<()> {
        for (what, tensors) in [
            ("weights", &self.weights.tensors),
            ("first-moment", &self.optimizer.first),
            ("second-moment", &self.optimizer.second),
        ] {
            for (tensor, values) in tensors.iter().enumerate() {
                if let Some((element, &value)) =
                    values.iter().enumerate().find(|(_, v)| !v.is_finite())
                {
                    return Err(Error::CheckpointNonFinite {
                        what,
                        tensor,
                        element,
                        value,
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the checkpoint to `path` atomically: into a temporary file in the same
    /// directory, flushed to disk, then renamed over `path`. On error `path` is as it was
    /// (the previous checkpoint, or nothing) and the temporary file is removed.
    ///
    /// # Errors
    /// [`Error::CheckpointCorrupt`] if the checkpoint is inconsistent (weights and moments
    /// of different sizes), [`Error::CheckpointNonFinite`] if it holds a NaN or infinity,
    /// [`Error::CheckpointIo`] if writing fails (also for an `extra` serde cannot write).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.check_consistent("to save")?;
        self.check_finite()?;
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
        {
            let mut out = BufWriter::new(tmp.as_file_mut());
            serde_json::to_writer(&mut out, self)
                .map_err(|e| io("serialise")(io::Error::other(e)))?;
            out.flush().map_err(io("write"))?;
        }
        tmp.as_file().sync_all().map_err(io("flush"))?;
        tmp.persist(path).map_err(|e| io("rename into")(e.error))?;
        // Make the rename itself durable; not every platform can open a directory.
        if let Ok(dir) = fs::File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    /// Reads a checkpoint written by [`Checkpoint::save`].
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] if there is no file at `path`, [`Error::CheckpointIo`]
    /// if it cannot be read, [`Error::CheckpointFormat`] or [`Error::CheckpointVersion`]
    /// for a file of another format or version, [`Error::CheckpointCorrupt`] for a file
    /// that does not parse (truncated, damaged, an `extra` of another type) or whose
    /// content is inconsistent.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = fs::read(path).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => Error::CheckpointNotFound {
                path: path.to_owned(),
            },
            _ => Error::CheckpointIo {
                action: "read",
                path: path.to_owned(),
                source,
            },
        })?;
        let what = path.display().to_string();
        let corrupt = |e: serde_json::Error| Error::CheckpointCorrupt {
            what: what.clone(),
            problem: format!("not a readable checkpoint ({e})"),
        };
        let header: Header = serde_json::from_slice(&bytes).map_err(corrupt)?;
        let found = header.format.unwrap_or_default();
        if found != Self::FORMAT {
            return Err(Error::CheckpointFormat {
                path: PathBuf::from(path),
                found,
                expected: Self::FORMAT,
            });
        }
        let version = header.version.unwrap_or(0);
        if version != Self::VERSION {
            return Err(Error::CheckpointVersion {
                path: path.to_owned(),
                found: version,
                supported: Self::VERSION,
            });
        }
        let checkpoint: Self = serde_json::from_slice(&bytes).map_err(corrupt)?;
        checkpoint.check_consistent(&what)?;
        Ok(checkpoint)
    }
}

fn frozen_error(tensor: usize) -> Error {
    Error::config(
        "checkpoint model",
        format!(
            "has a tensor that is not trained by gradients (visited after {tensor} trainable \
             tensors; batch-norm running statistics): checkpoints save trainable tensors only \
             and could not resume it exactly; use a model without batch norm"
        ),
    )
}

/// Walks `net` with a visitor that cannot fail.
fn walk<M, V>(net: &M, visitor: &mut V) -> Result<()>
where
    M: TensorCollection<f32, Cpu>,
    V: TensorVisitor<f32, Cpu, Viewer = ViewTensorRef, Err = Infallible, E2 = f32, D2 = Cpu>,
{
    let walked: std::result::Result<_, Infallible> =
        M::iter_tensors(&mut RecursiveWalker { m: net, f: visitor });
    match walked {
        Ok(_) => Ok(()),
        Err(never) => match never {},
    }
}

/// Copies trainable tensors and their shapes; notes the first non-trainable one.
struct Gather {
    weights: NetWeights,
    frozen: Option<usize>,
}

impl TensorVisitor<f32, Cpu> for Gather {
    type Viewer = ViewTensorRef;
    type Err = Infallible;
    type E2 = f32;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, f32, Cpu>,
        t: &Tensor<S, f32, Cpu>,
    ) -> std::result::Result<Option<Tensor<S, f32, Cpu>>, Infallible> {
        if opts.do_gradient_update {
            self.weights.shapes.push(t.shape().concrete().into());
            self.weights.tensors.push(t.as_vec());
        } else if self.frozen.is_none() {
            self.frozen = Some(self.weights.tensors.len());
        }
        Ok(None)
    }
}

/// Compares the shapes of trainable tensors with `shapes`; notes the first difference
/// (index and the model's shape), the number visited, and the first non-trainable tensor.
struct Check<'a> {
    shapes: &'a [Vec<usize>],
    next: usize,
    mismatch: Option<(usize, Vec<usize>)>,
    frozen: Option<usize>,
}

impl TensorVisitor<f32, Cpu> for Check<'_> {
    type Viewer = ViewTensorRef;
    type Err = Infallible;
    type E2 = f32;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, f32, Cpu>,
        t: &Tensor<S, f32, Cpu>,
    ) -> std::result::Result<Option<Tensor<S, f32, Cpu>>, Infallible> {
        if !opts.do_gradient_update {
            if self.frozen.is_none() {
                self.frozen = Some(self.next);
            }
            return Ok(None);
        }
        let tensor = self.next;
        self.next += 1;
        if self.mismatch.is_none() {
            let ours = t.shape().concrete();
            if self.shapes.get(tensor).map(Vec::as_slice) != Some(ours.as_ref()) {
                self.mismatch = Some((tensor, ours.into()));
            }
        }
        Ok(None)
    }
}

/// Writes `tensors` into the trainable tensors, in order; shapes were checked before.
struct Scatter<'a> {
    tensors: &'a [Vec<f32>],
    next: usize,
}

impl TensorVisitor<f32, Cpu> for Scatter<'_> {
    type Viewer = ViewTensorMut;
    type Err = Infallible;
    type E2 = f32;
    type D2 = Cpu;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, f32, Cpu>,
        t: &mut Tensor<S, f32, Cpu>,
    ) -> std::result::Result<Option<Tensor<S, f32, Cpu>>, Infallible> {
        if opts.do_gradient_update {
            t.copy_from(&self.tensors[self.next]);
            self.next += 1;
        }
        Ok(None)
    }
}
