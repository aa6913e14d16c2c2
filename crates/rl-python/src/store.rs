//! The storages behind the Python buffers (`rl_storage`'s `AnyReplay` and `AnyDedup`): RAM
//! or a memmap file, planned and checked against a budget before anything is allocated.

use std::path::Path;

use pyo3::prelude::*;
use rl_core::{MemoryBudget, MemoryPlan, NonFinite, Schema};
use rl_storage::dedup::{AnyDedup, DedupReplay};
use rl_storage::memmap::{MemmapOptions, MemmapStorage};
use rl_storage::ram::RamStorage;
use rl_storage::replay::{AnyReplay, ReplayBuffer};
use rl_storage::sampler::AnySampler;

use crate::error::{budget_error, storage_error};
use crate::sampler::SamplerSpec;

/// The plan of a buffer of `capacity` rows of `schema` in a file (`memmap`) or RAM, with
/// its sampler: the lines `ReplayBuffer.memory_plan` will show, before anything exists.
pub(crate) fn plan(
    schema: &Schema,
    capacity: usize,
    memmap: bool,
    sampler: &SamplerSpec,
) -> PyResult<MemoryPlan> {
    let storage = if memmap {
        MemmapStorage::plan(schema, capacity)
    } else {
        RamStorage::plan(schema, capacity)
    }
    .map_err(storage_error)?;
    let mut plan = MemoryPlan::new();
    plan.nest("replay", &storage);
    plan.nest("replay/sampler", &sampler.plan(capacity));
    Ok(plan)
}

/// Checks `plan` against `budget`, raising `MemoryBudgetError` with the whole plan.
pub(crate) fn check(plan: &MemoryPlan, budget: Option<&MemoryBudget>) -> PyResult<()> {
    match budget {
        Some(budget) => plan.check(budget).map_err(|err| budget_error(err, plan)),
        None => Ok(()),
    }
}

/// How a buffer is made: where, what sampler, whether non-finite values are allowed.
#[derive(Debug)]
pub(crate) struct Options<'a> {
    /// A new memmap file to create, or RAM.
    pub(crate) path: Option<&'a Path>,
    /// The sampler.
    pub(crate) sampler: SamplerSpec,
    /// Limits checked before allocating.
    pub(crate) budget: Option<MemoryBudget>,
    /// Accept NaN and infinities in float columns.
    pub(crate) non_finite: NonFinite,
}

/// Plans, checks the budget, then creates the storage (nothing is allocated on refusal).
fn storage_then<T>(
    schema: &Schema,
    capacity: usize,
    options: &Options<'_>,
    ram: impl FnOnce(RamStorage, AnySampler) -> rl_storage::Result<T>,
    file: impl FnOnce(MemmapStorage, AnySampler) -> rl_storage::Result<T>,
) -> PyResult<T> {
    let planned = plan(schema, capacity, options.path.is_some(), &options.sampler)?;
    check(&planned, options.budget.as_ref())?;
    let sampler = options.sampler.build(capacity).map_err(storage_error)?;
    match options.path {
        None => RamStorage::new(schema.clone(), capacity, None)
            .and_then(|storage| ram(storage, sampler)),
        Some(path) => {
            MemmapStorage::create(path, schema.clone(), capacity, MemmapOptions::default())
                .and_then(|storage| file(storage, sampler))
        }
    }
    .map_err(storage_error)
}

/// A new buffer.
pub(crate) fn create_replay(
    schema: &Schema,
    capacity: usize,
    options: &Options<'_>,
) -> PyResult<AnyReplay> {
    let non_finite = options.non_finite;
    storage_then(
        schema,
        capacity,
        options,
        |s, p| {
            Ok(AnyReplay::Ram(
                ReplayBuffer::new(s, p).with_non_finite(non_finite),
            ))
        },
        |s, p| {
            Ok(AnyReplay::Memmap(
                ReplayBuffer::new(s, p).with_non_finite(non_finite),
            ))
        },
    )
}

/// Reopens a memmap file at its last commit, with the sampler built for its capacity.
fn open_storage(path: &Path, sampler: &SamplerSpec) -> PyResult<(MemmapStorage, AnySampler)> {
    let storage = MemmapStorage::open(path, MemmapOptions::default()).map_err(storage_error)?;
    let sampler = sampler
        .build(rl_storage::storage::Storage::capacity(&storage))
        .map_err(storage_error)?;
    Ok((storage, sampler))
}

/// Reopens a memmap buffer at its last commit.
pub(crate) fn open_replay(
    path: &Path,
    sampler: &SamplerSpec,
    non_finite: NonFinite,
) -> PyResult<AnyReplay> {
    let (storage, sampler) = open_storage(path, sampler)?;
    Ok(AnyReplay::Memmap(
        ReplayBuffer::new(storage, sampler).with_non_finite(non_finite),
    ))
}

/// A new deduplicating buffer of transition `columns` (`final_obs` is added), stacking
/// `frames` observations at sample time.
pub(crate) fn create_dedup(
    schema: &Schema,
    capacity: usize,
    frames: usize,
    options: &Options<'_>,
) -> PyResult<AnyDedup> {
    let storage_schema = DedupReplay::<RamStorage>::schema(schema.columns().iter().cloned())
        .map_err(storage_error)?;
    let non_finite = options.non_finite;
    storage_then(
        &storage_schema,
        capacity,
        options,
        |s, p| {
            DedupReplay::new(s, p)?
                .with_frame_stack(frames)
                .map(|b| AnyDedup::Ram(b.with_non_finite(non_finite)))
        },
        |s, p| {
            DedupReplay::new(s, p)?
                .with_frame_stack(frames)
                .map(|b| AnyDedup::Memmap(b.with_non_finite(non_finite)))
        },
    )
}

/// Reopens a memmap deduplicating buffer at its last commit.
pub(crate) fn open_dedup(
    path: &Path,
    frames: usize,
    sampler: &SamplerSpec,
    non_finite: NonFinite,
) -> PyResult<AnyDedup> {
    let (storage, sampler) = open_storage(path, sampler)?;
    DedupReplay::new(storage, sampler)
        .and_then(|b| b.with_frame_stack(frames))
        .map(|b| AnyDedup::Memmap(b.with_non_finite(non_finite)))
        .map_err(storage_error)
}
