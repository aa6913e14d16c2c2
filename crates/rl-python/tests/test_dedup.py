"""flatrl.DedupReplayBuffer: observations stored once, next_obs and frame stacks rebuilt."""

import numpy as np
import pytest

import flatrl


def frames_schema(shape=(3,)):
    return {
        "obs": ("uint8", shape),
        "action": ("uint32", ()),
        "reward": ("float32", ()),
        "terminated": ("bool", ()),
        "truncated": ("bool", ()),
    }


def episode_steps(first, length, cut="truncated", shape=(3,)):
    """`length` steps whose observations are frames `first, first+1, ...`; the last step
    ends the episode by `cut`; final observation frame `first + length`."""
    index = np.arange(first, first + length)
    obs = np.broadcast_to((index % 256).astype(np.uint8).reshape(-1, *([1] * len(shape))), (length, *shape)).copy()
    ends = np.zeros(length, dtype=bool)
    ends[-1] = True
    columns = {
        "obs": obs,
        "action": index.astype(np.uint32),
        "reward": index.astype(np.float32),
        "terminated": ends if cut == "terminated" else np.zeros(length, bool),
        "truncated": ends if cut == "truncated" else np.zeros(length, bool),
    }
    final = np.zeros_like(obs)
    final[-1] = (first + length) % 256
    return columns, final


def test_next_obs_and_final_observations():
    rb = flatrl.DedupReplayBuffer(frames_schema(), 100, seed=1)
    for first, length, cut in [(0, 5, "truncated"), (10, 7, "terminated"), (20, 4, "truncated")]:
        columns, final = episode_steps(first, length, cut)
        assert rb.extend(columns, final) == length
    # One row per step plus one final row per episode.
    assert len(rb) == 16 + 3 and rb.episodes == 3
    batch = rb.new_batch(256)
    rb.sample(batch)
    step = batch["reward"].astype(np.int64)
    assert set(step) == set(range(0, 5)) | set(range(10, 17)) | set(range(20, 24))
    # next_obs is the following frame, the final observation at each episode's end.
    np.testing.assert_array_equal(batch["next_obs"][:, 0], (step + 1) % 256)
    np.testing.assert_array_equal(batch["obs"][:, 0], step % 256)
    assert rb.batch_schema["next_obs"] == ("uint8", (3,))


def test_frame_stacks_never_cross_an_episode_start():
    rb = flatrl.DedupReplayBuffer(frames_schema((2, 2)), 100, frame_stack=4, seed=0)
    for first, length in [(0, 6), (50, 3)]:
        rb.extend(*episode_steps(first, length, shape=(2, 2)))
    batch = rb.new_batch(200)
    rb.sample(batch)
    assert batch["obs"].shape == (200, 4, 2, 2)
    for step, obs, next_obs in zip(batch["reward"].astype(int), batch["obs"], batch["next_obs"]):
        start = 0 if step < 50 else 50
        expected = [max(start, step - k) for k in (3, 2, 1, 0)]  # padded with the first frame
        np.testing.assert_array_equal(obs[:, 0, 0], expected)
        np.testing.assert_array_equal(next_obs[:, 0, 0], [max(start, step + 1 - k) for k in (3, 2, 1, 0)])


def test_dedup_saves_the_next_obs_column():
    pixels = {"obs": ("uint8", (84, 84)), "terminated": ("bool", ()), "truncated": ("bool", ())}
    dedup = flatrl.DedupReplayBuffer.plan(pixels, 100_000, memmap=True)
    stored = flatrl.ReplayBuffer.plan({**pixels, "next_obs": ("uint8", (84, 84))}, 100_000, memmap=True)
    assert dedup.total("file") < 0.55 * stored.total("file")


def test_bad_steps_change_nothing():
    rb = flatrl.DedupReplayBuffer(frames_schema(), 50)
    rb.extend(*episode_steps(0, 3))
    before = len(rb), rb.column("obs").copy()
    columns, final = episode_steps(10, 4)
    with pytest.raises(ValueError, match="final_obs is None"):
        rb.extend(columns)
    with pytest.raises(ValueError, match="column `final_obs` has 3 rows"):
        rb.extend(columns, final[:3])
    bad = dict(columns, reward=np.array([0, 1, np.nan, 3], dtype=np.float32))
    with pytest.raises(ValueError, match="column `reward` row 2 is NaN"):
        rb.extend(bad, final)
    with pytest.raises(ValueError, match="column `obs` holds uint8"):
        rb.extend(dict(columns, obs=columns["obs"].astype(np.float32)), final)
    assert len(rb) == before[0]
    np.testing.assert_array_equal(rb.column("obs"), before[1])
    with pytest.raises(ValueError, match="frame stack"):
        flatrl.DedupReplayBuffer(frames_schema(), 50, frame_stack=0)
    with pytest.raises(ValueError, match="obs"):
        flatrl.DedupReplayBuffer({"x": ("float32", ())}, 50)


def test_memmap_dedup_reopens(tmp_path):
    path = tmp_path / "frames.rl"
    rb = flatrl.DedupReplayBuffer(frames_schema(), 100, frame_stack=2, path=path)
    rb.extend(*episode_steps(0, 8))
    rb.commit()
    rb.close()
    reopened = flatrl.DedupReplayBuffer.open(path, frame_stack=2)
    assert len(reopened) == 9
    batch = reopened.new_batch(32)
    reopened.sample(batch)
    step = batch["reward"].astype(int)
    np.testing.assert_array_equal(batch["obs"][:, 1, 0], step)
    np.testing.assert_array_equal(batch["obs"][:, 0, 0], np.maximum(step - 1, 0))
