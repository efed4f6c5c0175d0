"""A coarse level of the series store for overviews of long runs (the layers × steps heatmap).

At ingest every tensor statistic of a chunk also gets a ``max:<stat>`` blob: per tensor,
the maximum over each block of ``BLOCK`` consecutive steps of the chunk, where NaN wins
over everything and +Inf over any number (``numpy.maximum`` semantics), so spikes and
non-finite values stay visible at any zoom. ``max:steps`` holds each block's first step.
An overview of a 100k-step run then reads about 1/BLOCK of the data.

``heatmap`` groups those blocks into at most ``points`` columns the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import and_, select
from sqlmodel import Session, col

from gradwatch.server.models import SeriesBlob, SeriesChunk
from gradwatch.server.series import unpack

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


def _read(
    session: Session, run_id: str, optimizer: int, name: str
) -> list[tuple[int, bytes, str, int]]:
    query = (
        select(
            col(SeriesBlob.seq), col(SeriesBlob.data), col(SeriesBlob.dtype), col(SeriesBlob.rows)
        )
        .join(
            SeriesChunk,
            and_(
                col(SeriesChunk.run_id) == col(SeriesBlob.run_id),
                col(SeriesChunk.seq) == col(SeriesBlob.seq),
            ),
        )
        .where(
            col(SeriesBlob.run_id) == run_id,
            col(SeriesBlob.name) == name,
            col(SeriesChunk.optimizer) == optimizer,
        )
    )
    return [(int(a), bytes(b), str(c), int(d)) for a, b, c, d in session.execute(query)]


def heatmap(
    session: Session, run_id: str, optimizer: int, stat: str, points: int
) -> tuple[Vector, Vector]:
    """(first step of each column, ``(tensors, columns)`` maxima), at most ``points`` columns."""
    what = f"max:{stat} of run {run_id}"
    firsts = {}
    for seq, data, _, _ in _read(session, run_id, optimizer, "max:steps"):
        found = unpack(data, "i8", 1, len(data) // 8, what)
        if found is not None:
            firsts[seq] = found[0]
    step_parts: list[Vector] = []
    value_parts: list[Vector] = []
    for seq, data, dtype, nrows in _read(session, run_id, optimizer, f"max:{stat}"):
        if seq not in firsts:
            continue
        matrix = unpack(data, dtype, nrows, len(firsts[seq]), what)
        if matrix is None:
            continue
        if value_parts and matrix.shape[0] != value_parts[0].shape[0]:
            continue  # a chunk with another tensor count (a group added mid-run)
        step_parts.append(firsts[seq])
        value_parts.append(matrix)
    if not step_parts:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0))
    steps = np.concatenate(step_parts)
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], np.concatenate(value_parts, axis=1)[:, order]
    per = -(-len(steps) // max(points, 1))
    starts = np.arange(0, len(steps), per)
    return steps[starts], np.maximum.reduceat(values, starts, axis=1).astype(np.float64)
