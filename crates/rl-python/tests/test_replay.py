"""flatrl.ReplayBuffer in RAM: writing, sampling into reused arrays, samplers, plans."""

import numpy as np
import pytest

import flatrl
from conftest import rows, transition_schema


def check_rows_consistent(batch, n=None):
    """Every sampled row is a row that was written (its columns agree on its index)."""
    index = batch["reward"].astype(np.int64)
    if n is not None:
        assert len(index) == n
    np.testing.assert_array_equal(batch["obs"][:, 0], index * 10)
    np.testing.assert_array_equal(batch["next_obs"], batch["obs"] + 1)
    np.testing.assert_array_equal(batch["action"], index % 7)
    return index


def test_extend_then_sample_returns_stored_rows(schema):
    rb = flatrl.ReplayBuffer(schema, 100)
    assert rb.extend(rows(0, 30)) == 30
    assert len(rb) == 30 and rb.capacity == 100 and rb.written == 30
    batch = rb.new_batch(64)
    rb.sample(batch)
    index = check_rows_consistent(batch, 64)
    assert index.min() >= 0 and index.max() < 30
    np.testing.assert_array_equal(batch.positions, index)  # no wrap yet: position = index
    np.testing.assert_array_equal(batch.weights, np.ones(64, np.float32))
    np.testing.assert_array_equal(rb.column("reward"), np.arange(30, dtype=np.float32))
    assert rb.schema == {k: (d, tuple(s)) for k, (d, s) in schema.items()}


def test_the_ring_keeps_the_newest_rows(schema):
    rb = flatrl.ReplayBuffer(schema, 50)
    for start in range(0, 130, 13):
        rb.extend(rows(start, 13))
    assert len(rb) == 50 and rb.written == 130
    np.testing.assert_array_equal(rb.column("reward"), np.arange(80, 130, dtype=np.float32))
    batch = rb.new_batch(256)
    rb.sample(batch)
    index = check_rows_consistent(batch)
    assert index.min() >= 80


def test_batch_arrays_are_reused_and_share_memory(schema):
    rb = flatrl.ReplayBuffer(schema, 1000, sampler=flatrl.Uniform(seed=3))
    rb.extend(rows(0, 1000))
    batch = rb.new_batch(128)
    obs = batch["obs"]
    address = obs.__array_interface__["data"][0]
    rb.sample(batch)
    first = obs.copy()
    assert rb.sample(batch) is batch
    # The same array object, the same memory, new contents: torch.from_numpy(obs) made
    # once sees every sample without a copy.
    assert batch["obs"] is obs
    assert batch["obs"].__array_interface__["data"][0] == address
    assert not np.array_equal(first, obs)
    check_rows_consistent(batch, 128)
    assert set(batch.keys()) == set(schema) and "obs" in batch
    assert batch.room == 128 and len(batch) == 128
    assert set(batch.as_dict()) == set(schema)


def test_same_seed_same_draws(schema):
    draws = []
    for _ in range(2):
        rb = flatrl.ReplayBuffer(schema, 100, sampler=flatrl.Uniform(seed=7))
        rb.extend(rows(0, 100))
        batch = rb.new_batch(32)
        rb.sample(batch)
        draws.append(batch.positions.copy())
    np.testing.assert_array_equal(draws[0], draws[1])


def test_prioritized_sampling_follows_priorities(schema):
    rb = flatrl.ReplayBuffer(schema, 64, sampler=flatrl.Prioritized(alpha=1.0, beta=1.0, seed=1))
    rb.extend(rows(0, 64))
    batch = rb.new_batch(64)
    rb.sample(batch)
    # Row 5 gets nearly all the priority mass.
    priorities = np.full(64, 1e-3, dtype=np.float32)
    priorities[5] = 1000.0
    rb.update_priorities(np.arange(64, dtype=np.uint64), priorities)
    counts = np.zeros(64, dtype=np.int64)
    for _ in range(20):
        rb.sample(batch)
        check_rows_consistent(batch)
        np.add.at(counts, batch.positions.astype(np.int64), 1)
    assert counts[5] > 0.95 * counts.sum()
    # Importance weights: the frequent row weighs least (normalised to max 1).
    rb.sample(batch)
    weights = batch.weights
    assert weights.max() <= 1.0 + 1e-6
    assert weights[batch.positions == 5].max() < 0.1
    rb.set_beta(0.0)
    rb.sample(batch)
    np.testing.assert_allclose(batch.weights, 1.0)


def test_priority_updates_refuse_bad_input_and_change_nothing(schema):
    rb = flatrl.ReplayBuffer(schema, 16, sampler=flatrl.Prioritized(seed=0))
    rb.extend(rows(0, 8))
    batch = rb.new_batch(8)
    before = []
    for bad_positions, bad_priorities in [
        (np.array([0, 1], dtype=np.uint64), np.array([1.0], dtype=np.float32)),  # lengths
        (np.array([0, 12], dtype=np.uint64), np.ones(2, dtype=np.float32)),  # not stored
        (np.array([0, 1], dtype=np.uint64), np.array([1.0, np.nan], dtype=np.float32)),
        (np.array([0, 1], dtype=np.uint64), np.array([1.0, -1.0], dtype=np.float32)),
        (np.array([-1, 1], dtype=np.int64), np.ones(2, dtype=np.float32)),
        ([0, 1], np.ones(2, dtype=np.float32)),  # not an array
    ]:
        with pytest.raises(ValueError):
            rb.update_priorities(bad_positions, bad_priorities)
    # Nothing changed: draws equal those of a twin buffer that never saw the bad calls.
    twin = flatrl.ReplayBuffer(schema, 16, sampler=flatrl.Prioritized(seed=0))
    twin.extend(rows(0, 8))
    twin_batch = twin.new_batch(8)
    for _ in range(5):
        rb.sample(batch)
        twin.sample(twin_batch)
        np.testing.assert_array_equal(batch.positions, twin_batch.positions)
        np.testing.assert_array_equal(batch.weights, twin_batch.weights)
    uniform = flatrl.ReplayBuffer(schema, 16)
    uniform.extend(rows(0, 8))
    with pytest.raises(ValueError, match="not prioritized"):
        uniform.update_priorities(np.arange(2, dtype=np.uint64), np.ones(2, np.float32))
    with pytest.raises(ValueError):
        flatrl.Prioritized(alpha=-1.0)
    with pytest.raises(ValueError):
        flatrl.Prioritized(beta=2.0)


def test_slice_sampler_windows_stay_in_one_episode(schema):
    rb = flatrl.ReplayBuffer(schema, 200, sampler=flatrl.SliceSampler(4, seed=0))
    rb.extend(rows(0, 200, episode=10))  # rows 9, 19, ... end episodes
    batch = rb.new_batch(64)
    for _ in range(10):
        rb.sample(batch)
        windows = check_rows_consistent(batch, 64).reshape(16, 4)
        np.testing.assert_array_equal(np.diff(windows, axis=1), 1)
        # Only the last row of a window may end an episode.
        assert not np.any(windows[:, :3] % 10 == 9)
    with pytest.raises(ValueError, match="multiple of the slice length"):
        rb.sample(rb.new_batch(6))
    with pytest.raises(ValueError):
        flatrl.SliceSampler(0)


def test_memory_plan_before_and_after(schema):
    for sampler in [None, flatrl.Prioritized(), flatrl.SliceSampler(2)]:
        plan = flatrl.ReplayBuffer.plan(schema, 1000, sampler=sampler)
        rb = flatrl.ReplayBuffer(schema, 1000, sampler=sampler)
        # The plan made before allocation is the buffer's own, line for line.
        assert plan.lines == rb.memory_plan.lines
        assert plan.total("ram") == sum(b for _, loc, b in plan.lines if loc == "ram")
    table = str(plan)
    assert table.splitlines()[0].split() == ["component", "location", "bytes"]
    assert "replay/obs" in table and "total:" in table
    assert plan.total("file") == 0 and len(plan) == 6
    file_plan = flatrl.ReplayBuffer.plan(schema, 1000, memmap=True)
    assert file_plan.total("ram") == 0 and file_plan.total("file") > 0
    with pytest.raises(ValueError, match="unknown location"):
        plan.total("disk")


def test_over_budget_is_refused_with_the_plan(schema):
    budget = flatrl.MemoryBudget(ram=1 << 20)
    with pytest.raises(flatrl.MemoryBudgetError) as raised:
        flatrl.ReplayBuffer(schema, 1_000_000, budget=budget)
    err = raised.value
    assert isinstance(err, MemoryError)
    assert "budget allows 1.00 MiB" in str(err)
    expected = flatrl.ReplayBuffer.plan(schema, 1_000_000)
    assert err.plan.lines == expected.lines
    assert err.plan.total("ram") > 1 << 20
    # Prioritized trees count too; a plan that fits is accepted.
    plan = flatrl.ReplayBuffer.plan(schema, 1000, sampler=flatrl.Prioritized())
    fits = flatrl.MemoryBudget(ram=plan.total("ram"))
    flatrl.ReplayBuffer(schema, 1000, sampler=flatrl.Prioritized(), budget=fits)
    with pytest.raises(flatrl.MemoryBudgetError):
        tight = flatrl.MemoryBudget(ram=plan.total("ram") - 1)
        flatrl.ReplayBuffer(schema, 1000, sampler=flatrl.Prioritized(), budget=tight)
    # Files count against `file`, not `ram`.
    assert repr(flatrl.MemoryBudget(ram=5)) == "MemoryBudget(ram=5, file=None)"


def test_all_dtypes_round_trip():
    schema = {
        "f": ("float32", (2,)),
        "u": (np.uint32, ()),
        "i": ("int64", (3,)),
        "b": (np.uint8, (2, 2)),
        "flag": ("bool", ()),
    }
    rb = flatrl.ReplayBuffer(schema, 10)
    data = {
        "f": np.array([[1.5, -2.0]], dtype=np.float32),
        "u": np.array([4_000_000_000], dtype=np.uint32),
        "i": np.array([[-(2**40), 0, 2**40]], dtype=np.int64),
        "b": np.array([[[0, 255], [7, 8]]], dtype=np.uint8),
        "flag": np.array([True]),
    }
    rb.extend(data)
    batch = rb.new_batch(3, index_dtype="uint32")
    rb.sample(batch)
    for name, value in data.items():
        assert batch[name].dtype == value.dtype, name
        np.testing.assert_array_equal(batch[name], np.repeat(value, 3, axis=0))
        np.testing.assert_array_equal(rb.column(name), value)
    # By default uint32 columns come out as int64 (what torch indexes with), same values.
    wide = rb.new_batch(3)
    rb.sample(wide)
    assert wide["u"].dtype == np.int64
    assert wide["u"].tolist() == [4_000_000_000] * 3
    assert wide["f"].dtype == np.float32 and wide["i"].dtype == np.int64


def test_discrete_actions_come_out_as_int64_in_the_same_array_every_sample():
    rb = flatrl.ReplayBuffer({"obs": ("float32", (2,)), "action": ("uint32", ())}, 100)
    index = np.arange(50)
    rb.extend({"obs": np.stack([index, -index], axis=1).astype(np.float32), "action": (index % 5).astype(np.uint32)})
    batch = rb.new_batch(16)
    actions = batch["action"]
    assert actions.dtype == np.int64 and actions.shape == (16,)
    for _ in range(3):
        rb.sample(batch)
        assert batch["action"] is actions
        # Each row's action is the one stored with its observation.
        np.testing.assert_array_equal(actions, batch["obs"][:, 0].astype(np.int64) % 5)
    with pytest.raises(ValueError, match="index_dtype"):
        rb.new_batch(4, index_dtype="int32")


def test_non_contiguous_input_is_accepted(schema):
    rb = flatrl.ReplayBuffer(schema, 10)
    data = rows(0, 6)
    data["obs"] = np.asfortranarray(data["obs"])
    data["reward"] = np.repeat(data["reward"], 2)[::2]  # strided
    rb.extend(data)
    np.testing.assert_array_equal(rb.column("obs"), rows(0, 6)["obs"])
    np.testing.assert_array_equal(rb.column("reward"), rows(0, 6)["reward"])


def test_large_writes_and_samples_release_the_gil():
    # Above 64 KiB the copies run without the GIL; results must be the same.
    schema = transition_schema(1024)
    rb = flatrl.ReplayBuffer(schema, 300)
    rb.extend(rows(0, 300, obs_dim=1024))
    batch = rb.new_batch(64)
    rb.sample(batch)
    check_rows_consistent(batch, 64)


@pytest.mark.parametrize("obs_dim", [65, 100, 1024])
@pytest.mark.parametrize("room", [1, 7, 64])
def test_wide_rows_are_sampled_whole(obs_dim, room):
    # Rows past 256 bytes are gathered two at a time, line by line, with a tail past the
    # last whole line (obs_dim 65 and 100) and a lone last row (odd rooms): every sampled
    # row equals its stored row in full.
    schema = transition_schema(obs_dim)
    rb = flatrl.ReplayBuffer(schema, 40, sampler=flatrl.Uniform(seed=obs_dim))
    data = rows(0, 40, obs_dim=obs_dim)
    data["obs"] = np.random.default_rng(room).standard_normal((40, obs_dim), dtype=np.float32)
    data["next_obs"] = data["obs"] * 2
    rb.extend(data)
    batch = rb.new_batch(room)
    for _ in range(3):
        rb.sample(batch)
        np.testing.assert_array_equal(batch["obs"], data["obs"][batch.positions])
        np.testing.assert_array_equal(batch["next_obs"], data["next_obs"][batch.positions])
        np.testing.assert_array_equal(batch["reward"], data["reward"][batch.positions])


@pytest.mark.parametrize("memmap", [False, True])
def test_threads_gather_the_same_batch(tmp_path, memmap):
    # 256 rows of 2 x 1024 floats (2 MiB a sample): split over 2 or 3 threads, the same
    # draws and bytes as on the calling thread, every row the stored one.
    schema = transition_schema(1024)
    data = rows(0, 600, obs_dim=1024)
    data["obs"] = np.random.default_rng(3).standard_normal((600, 1024), dtype=np.float32)
    data["next_obs"] = data["obs"] + 1
    batches = {}
    for threads in [1, 2, 3]:
        path = tmp_path / f"{threads}.rlmm" if memmap else None
        rb = flatrl.ReplayBuffer(schema, 500, path=path, sampler=flatrl.Uniform(seed=5), threads=threads)
        rb.extend(data)
        batch = rb.new_batch(256)
        batches[threads] = []
        for _ in range(3):
            rb.sample(batch)
            stored = batch.positions.astype(np.int64)
            # 600 rows into 500: position p holds row p + 500 for p < 100.
            ids = np.where(stored < 100, stored + 500, stored)
            np.testing.assert_array_equal(batch["obs"], data["obs"][ids])
            batches[threads].append({k: v.copy() for k, v in batch.as_dict().items()})
    for threads in [2, 3]:
        for got, want in zip(batches[threads], batches[1]):
            for key in want:
                np.testing.assert_array_equal(got[key], want[key])
    with pytest.raises(ValueError, match="threads"):
        flatrl.ReplayBuffer(schema, 10, threads=0)


def test_closed_buffer_refuses_calls(schema):
    with flatrl.ReplayBuffer(schema, 10) as rb:
        rb.extend(rows(0, 2))
    with pytest.raises(ValueError, match="closed"):
        len(rb)
    with pytest.raises(ValueError, match="closed"):
        rb.extend(rows(0, 2))
    assert "closed" in repr(rb)
