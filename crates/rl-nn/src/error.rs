//! The one error type of `rl-nn`.

use std::path::PathBuf;

use crate::Architecture;

/// Result alias used throughout `rl-nn`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `rl-nn`. Every message says what was wrong and what to
/// do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is invalid (a zero layer width, a learning rate of 0 ...).
    #[error("invalid configuration: {what} {problem}")]
    Config {
        /// The setting that is wrong, e.g. `"adam.lr"`.
        what: String,
        /// What is wrong with it and how to fix it.
        problem: String,
    },

    /// A buffer has the wrong number of elements.
    #[error(
        "{what} has {actual} elements but {expected} were expected: size it as rows times the network's width"
    )]
    ShapeMismatch {
        /// Which buffer, e.g. `"network input (rows x input width)"`.
        what: &'static str,
        /// Elements expected.
        expected: usize,
        /// Elements given.
        actual: usize,
    },

    /// Weights, a workspace or an optimiser state made for one architecture were given to
    /// another. Nothing was changed.
    #[error(
        "{what} is for {found} but the network is {expected}: load it into a network of the architecture it was saved from"
    )]
    ArchitectureMismatch {
        /// What did not fit, e.g. `"safetensors file weights.safetensors, network \"actor\""`.
        what: String,
        /// The network's architecture.
        expected: Architecture,
        /// The architecture the weights or state were made for.
        found: Architecture,
    },

    /// A saved optimiser state does not fit the parameters it is loaded for.
    #[error(
        "optimiser state {what}: it was saved for another network; load it into the network it was saved with"
    )]
    StateMismatch {
        /// What differs.
        what: String,
    },

    /// A checkpoint or weights file does not exist.
    #[error("no checkpoint at {path}: check the path (checkpoints are written by save)")]
    CheckpointNotFound {
        /// The path looked at.
        path: PathBuf,
    },

    /// Reading or writing a checkpoint failed.
    #[error("could not {action} checkpoint {path}: {source}")]
    CheckpointIo {
        /// What was being done, e.g. `"write"`.
        action: &'static str,
        /// The checkpoint's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A file is not a checkpoint of this format, or is damaged or truncated.
    #[error("{what} is not a usable checkpoint: {problem}")]
    CheckpointCorrupt {
        /// The file (or `"checkpoint to save"`).
        what: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A checkpoint's bytes do not match the checksums saved with them: the file was
    /// damaged after it was written (disk, copy, transfer). Nothing of it was used.
    #[error(
        "{path} is damaged: {}; nothing of it was used, resume from another checkpoint",
        checksum_problem(.tensor.as_deref(), .problem)
    )]
    CheckpointChecksum {
        /// The checkpoint's path.
        path: PathBuf,
        /// The damaged tensor, or `None` for the header (metadata, trainer state, tensor
        /// names, types, shapes and offsets).
        tensor: Option<String>,
        /// What was found, for the header: a checksum mismatch, a missing checksum, or a
        /// header not laid out as this library writes it.
        problem: String,
    },

    /// A checkpoint written by another kind of trainer (a PPO checkpoint given to SAC).
    #[error(
        "{path} is a {found} checkpoint but this is a {expected} trainer: resume it with the trainer that wrote it"
    )]
    CheckpointKind {
        /// The checkpoint's path.
        path: PathBuf,
        /// The kind this trainer writes, e.g. `"ppo"`.
        expected: String,
        /// The kind the file holds.
        found: String,
    },

    /// A checkpoint of a format version this build cannot read.
    #[error(
        "{path} is checkpoint format version {found} but this build reads version {supported}: use the version of rl that wrote it"
    )]
    CheckpointVersion {
        /// The checkpoint's path.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },

    /// A value to save is NaN or infinite (training diverged): nothing was written.
    #[error(
        "{what} value {element} of tensor {tensor} is {value}: training diverged; resume from an earlier checkpoint or lower the learning rate"
    )]
    NonFinite {
        /// Which part, e.g. `"network \"actor\" weights"`.
        what: String,
        /// The tensor's name.
        tensor: String,
        /// Index within the tensor.
        element: usize,
        /// The value.
        value: f32,
    },
}

impl Error {
    /// An [`Error::Config`].
    pub(crate) fn config(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Config {
            what: what.into(),
            problem: problem.into(),
        }
    }

    /// An [`Error::ShapeMismatch`].
    pub(crate) fn shape(what: &'static str, expected: usize, actual: usize) -> Self {
        Self::ShapeMismatch {
            what,
            expected,
            actual,
        }
    }
}

/// `Ok` if `actual == expected`, else [`Error::ShapeMismatch`].
/// Checks the buffers of a network's backward pass over `rows` rows: `output_grads`
/// (`rows x output width`), the optional parameter gradients (`params` floats) and the
/// optional input gradients (`rows x input width`, described as `input_what`).
#[allow(
    clippy::too_many_arguments,
    reason = "each buffer with its expected length"
)]
pub(crate) fn check_backward(
    rows: usize,
    output_dim: usize,
    output_grads: usize,
    params: usize,
    param_grads: Option<usize>,
    input_dim: usize,
    input_grads: Option<usize>,
    input_what: &'static str,
) -> Result<()> {
    check_len(
        "output gradients (rows x output width)",
        rows * output_dim,
        output_grads,
    )?;
    if let Some(len) = param_grads {
        check_len("parameter gradients", params, len)?;
    }
    if let Some(len) = input_grads {
        check_len(input_what, rows * input_dim, len)?;
    }
    Ok(())
}

pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::shape(what, expected, actual))
    }
}

/// The middle of [`Error::CheckpointChecksum`]'s message.
fn checksum_problem(tensor: Option<&str>, problem: &str) -> String {
    match tensor {
        Some(tensor) => format!("the data of tensor {tensor:?} does not match its checksum"),
        None => format!("its header does not match its checksum ({problem})"),
    }
}
