"""Memmap buffers: commit, reopen, and reopen after the writer was killed with SIGKILL."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flatrl
from conftest import rows


def test_commit_and_reopen(schema, tmp_path):
    path = tmp_path / "replay.rl"
    rb = flatrl.ReplayBuffer(schema, 100, path=path)
    assert rb.path == path
    assert rb.memory_plan.total("file") > 0 and rb.memory_plan.total("ram") == 0
    rb.extend(rows(0, 40, episode=10))
    rb.commit()
    rb.close()
    reopened = flatrl.ReplayBuffer.open(path)
    assert len(reopened) == 40 and reopened.episodes == 4
    for name, values in rows(0, 40, episode=10).items():
        np.testing.assert_array_equal(reopened.column(name), values)
    batch = reopened.new_batch(16)
    reopened.sample(batch)
    assert set(batch["reward"].astype(int)) <= set(range(40))
    # It keeps writing where the commit left it.
    reopened.extend(rows(40, 70))
    assert len(reopened) == 100 and reopened.written == 110


def test_a_file_is_never_overwritten_nor_opened_twice(schema, tmp_path):
    path = tmp_path / "replay.rl"
    rb = flatrl.ReplayBuffer(schema, 10, path=path)
    with pytest.raises(OSError):
        flatrl.ReplayBuffer(schema, 10, path=path)  # exists
    with pytest.raises(OSError, match="locked"):
        flatrl.ReplayBuffer.open(path)
    rb.close()
    flatrl.ReplayBuffer.open(path).close()


def test_broken_files_are_refused(schema, tmp_path):
    path = tmp_path / "replay.rl"
    flatrl.ReplayBuffer(schema, 1000, path=path).close()
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(OSError, match="truncated"):
        flatrl.ReplayBuffer.open(path)
    junk = tmp_path / "junk.rl"
    junk.write_bytes(b"not a buffer" * 1000)
    with pytest.raises(OSError):
        flatrl.ReplayBuffer.open(junk)
    with pytest.raises(OSError):
        flatrl.ReplayBuffer.open(tmp_path / "missing.rl")


WRITER = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import flatrl
    from conftest import rows, transition_schema
    path, committed, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rb = flatrl.ReplayBuffer(transition_schema(), 10_000, path=path)
    for start in range(0, committed, 100):
        rb.extend(rows(start, 100))
    rb.commit()
    rb.extend(rows(committed, extra))  # written, never committed
    print("ready", flush=True)
    signal.pause()
    """
)


@pytest.mark.parametrize("extra", [1, 700])
def test_reopen_after_the_writer_was_killed(tmp_path, extra):
    path = tmp_path / "killed.rl"
    committed = 2000
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(committed), str(extra)],
        stdout=subprocess.PIPE,
        cwd=os.path.dirname(__file__),
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    rb = flatrl.ReplayBuffer.open(path)
    # Every committed row is back, exactly; rows after the commit are back only where a
    # reservation counted them, and then exactly as written.
    n = len(rb)
    assert committed <= n <= committed + extra
    for name, values in rows(0, n).items():
        np.testing.assert_array_equal(rb.column(name), values)
    batch = rb.new_batch(64)
    rb.sample(batch)
    assert batch["reward"].max() < n
    rb.extend(rows(n, 5))
    assert len(rb) == n + 5
