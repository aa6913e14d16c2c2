"""Gymnasium spaces from the plain tuples the Rust core describes its spaces with (shared
by ``vector.py`` and ``sb3.py``; needs only ``gymnasium.spaces``, present in every
Gymnasium release SB3 supports)."""

from __future__ import annotations

import gymnasium
import numpy as np


def _space(description: tuple) -> gymnasium.Space:
    """A Gymnasium space from the plain tuple the Rust core describes it with."""
    if description[0] == "discrete":
        return gymnasium.spaces.Discrete(description[1])
    _, low, high, shape, dtype = description
    return gymnasium.spaces.Box(
        low=np.asarray(low, dtype=np.float32).reshape(shape),
        high=np.asarray(high, dtype=np.float32).reshape(shape),
        shape=tuple(shape),
        dtype=np.dtype(dtype),
    )
