"""A coarse level of the series store for overviews of long runs (the layers × steps heatmap).

At ingest every tensor statistic of a chunk also gets a ``max:<stat>`` blob: per tensor,
the maximum over each block of ``BLOCK`` consecutive steps of the chunk, where NaN wins
over everything and +Inf over any number (``numpy.maximum`` semantics), so spikes and
non-finite values stay visible at any zoom. ``max:steps`` holds each block's first step.
An overview of a 100k-step run then reads about 1/BLOCK of the data
(:mod:`gradwatch_server.read.overview`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

BLOCK = 64
Vector = np.ndarray[Any, Any]


def summary_blobs(
    key: dict[str, Any], stat: str, rows: Vector, steps: Vector
) -> list[dict[str, Any]]:
    """The ``max:<stat>`` blob of a ``(tensors, n)`` matrix (and ``max:steps`` once per chunk)."""
    starts = np.arange(0, rows.shape[1], BLOCK)
    maxima = np.maximum.reduceat(rows, starts, axis=1) if rows.size else rows
    blob = {
        **key,
        "name": f"max:{stat}",
        "dtype": maxima.dtype.str.lstrip("<|"),
        "rows": rows.shape[0],
    }
    return [{**blob, "data": np.ascontiguousarray(maxima).tobytes()}]


def steps_blob(key: dict[str, Any], steps: Vector) -> dict[str, Any]:
    """The first step of every block of the chunk."""
    firsts = np.ascontiguousarray(steps[::BLOCK], dtype="<i8")
    return {**key, "name": "max:steps", "dtype": "i8", "rows": 1, "data": firsts.tobytes()}
