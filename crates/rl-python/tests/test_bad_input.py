"""Bad input raises ValueError naming what is wrong, and nothing stored changes."""

import numpy as np
import pytest

import flatrl
from conftest import rows


def snapshot(rb):
    return len(rb), rb.written, {name: rb.column(name).copy() for name in rb.schema}


def assert_unchanged(rb, before):
    after = snapshot(rb)
    assert after[0] == before[0] and after[1] == before[1]
    for name, values in before[2].items():
        np.testing.assert_array_equal(after[2][name], values)


@pytest.fixture
def filled(schema):
    rb = flatrl.ReplayBuffer(schema, 20)
    rb.extend(rows(0, 15))
    return rb


def with_column(name, value):
    data = rows(100, 3)
    data[name] = value
    return data


@pytest.mark.parametrize(
    "data, message",
    [
        (with_column("obs", rows(0, 3)["obs"].astype(np.float64)), "column `obs` holds float32 but the array is float64"),
        (with_column("action", np.arange(3, dtype=np.int64)), "column `action` holds uint32"),
        (with_column("terminated", np.zeros(3, dtype=np.uint8)), "column `terminated` holds bool"),
        (with_column("obs", np.zeros((3, 5), dtype=np.float32)), r"column `obs` expects an array of shape \(n, 4\), got \[3, 5\]"),
        (with_column("obs", np.zeros(12, dtype=np.float32)), "column `obs` expects an array of shape"),
        (with_column("reward", np.zeros((3, 1), dtype=np.float32)), "column `reward` expects"),
        (with_column("reward", np.float32(1.0)), "column `reward`"),
        (with_column("reward", np.zeros(4, dtype=np.float32)), "column `reward` has 4 rows but `obs` has 3"),
        (with_column("reward", [1.0, 2.0, 3.0]), "column `reward` is a list, not a numpy array"),
        (with_column("obs", np.full((3, 4), np.nan, dtype=np.float32)), "column `obs` row 0 of the write is NaN"),
        (with_column("next_obs", np.array([[0, 0, 0, 0], [0, 0, 0, 0], [0, np.inf, 0, 0]], dtype=np.float32)), "column `next_obs` row 2 of the write is inf"),
        (with_column("reward", np.array([0.0, -np.inf, 0.0], dtype=np.float32)), "column `reward` row 1"),
        ({k: v for k, v in rows(0, 3).items() if k != "truncated"}, "column `truncated` is missing"),
        ({**rows(0, 3), "extra": np.zeros(3, np.float32)}, "extra is not a column of this buffer"),
        ({k: v[:0] for k, v in rows(0, 3).items()}, "zero rows"),
        ([1, 2, 3], "must be a dict"),
    ],
)
def test_bad_writes_change_nothing(filled, data, message):
    before = snapshot(filled)
    with pytest.raises(ValueError, match=message):
        filled.extend(data)
    assert_unchanged(filled, before)
    # The buffer still works afterwards.
    filled.extend(rows(15, 2))
    assert len(filled) == 17


def test_non_finite_values_can_be_allowed(schema):
    rb = flatrl.ReplayBuffer(schema, 4, allow_non_finite=True)
    rb.extend(with_column("reward", np.array([np.nan, np.inf, 1.0], dtype=np.float32)))
    assert np.isnan(rb.column("reward")[0]) and np.isinf(rb.column("reward")[1])


@pytest.mark.parametrize(
    "schema, message",
    [
        ({}, "no columns"),
        ({"obs": ("float64", (4,))}, "column `obs` has dtype float64"),
        ({"obs": ("complex64", (4,))}, "column `obs` has dtype complex64"),
        ({"obs": ("not-a-dtype", (4,))}, "column `obs`: not-a-dtype is not a numpy dtype"),
        ({"obs": ("float32", (4, 0))}, r"column `obs` has shape \(4, 0\)"),
        ({"obs": ("float32", (-1,))}, "column `obs` has shape"),
        ({"obs": ("float32", "x")}, "column `obs` has shape"),
        ({"obs": "float32"}, "column `obs` is float32: give a \\(dtype, shape\\) tuple"),
        ({"": ("float32", ())}, "empty name"),
        ({1: ("float32", ())}, "schema key 1 is not a string"),
        ([("obs", "float32")], "schema must be a dict"),
    ],
)
def test_bad_schemas(schema, message):
    with pytest.raises(ValueError, match=message):
        flatrl.ReplayBuffer(schema, 10)


def test_zero_sizes(schema):
    with pytest.raises(ValueError, match="capacity"):
        flatrl.ReplayBuffer(schema, 0)
    with pytest.raises(ValueError, match="capacity"):
        flatrl.ReplayBuffer.plan(schema, 0)
    rb = flatrl.ReplayBuffer(schema, 10)
    with pytest.raises(ValueError, match="batch rows"):
        rb.new_batch(0)
    with pytest.raises(OverflowError):
        flatrl.ReplayBuffer(schema, -1)


def test_sampling_bad_cases(schema):
    rb = flatrl.ReplayBuffer(schema, 10)
    batch = rb.new_batch(4)
    with pytest.raises(ValueError, match="empty buffer"):
        rb.sample(batch)
    rb.extend(rows(0, 3))
    other = flatrl.ReplayBuffer({"x": ("float32", ())}, 10)
    with pytest.raises(ValueError, match="another schema"):
        rb.sample(other.new_batch(4))
    with pytest.raises(TypeError):
        rb.sample("not a batch")
    with pytest.raises(KeyError, match="no column `nope`"):
        batch["nope"]
    with pytest.raises(ValueError, match="sampler must be"):
        flatrl.ReplayBuffer(schema, 10, sampler="uniform")
