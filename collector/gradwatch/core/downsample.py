"""Downsampling of one series, shared by the server and the local reader (numpy only).

``downsample`` keeps, for each of ``points // 2`` equal buckets of steps, the point with
the smallest and the one with the largest finite value, plus every non-finite point
(NaN, ±Inf) wherever it falls: spikes and NaN onsets stay visible however far a long run
is zoomed out, and the result may exceed ``points`` by the number of non-finite points.
Reading a run locally and from a server gives the same points because both call this.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Vector = np.ndarray[Any, Any]


def downsample(steps: Vector, values: Vector, points: int) -> tuple[Vector, Vector]:
    """At most ``points`` min/max points (plus every non-finite one), in step order."""
    n = len(values)
    if n <= points:
        return steps, values
    buckets = max(points // 2, 1)
    size = -(-n // buckets)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = values
    grid = padded.reshape(buckets, size)
    finite = np.isfinite(grid)
    offsets = np.arange(buckets) * size
    low = np.where(finite, grid, np.inf).argmin(axis=1) + offsets
    high = np.where(finite, grid, -np.inf).argmax(axis=1) + offsets
    bad = np.flatnonzero(~np.isfinite(values))
    keep = np.unique(np.concatenate([low, high, bad]))
    keep = keep[keep < n]
    return steps[keep], values[keep]
