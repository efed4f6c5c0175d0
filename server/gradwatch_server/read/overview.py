"""Overviews of long runs (the layers × steps heatmap) from the coarse level of the series
store that ingest writes (:mod:`gradwatch_server.ingest.summaries`: per tensor, the maximum
over each block of steps, and ``max:steps``, each block's first step).

``heatmap`` groups those blocks into at most ``points`` columns the same way (``heatmaps``:
several statistics in the same columns, the block steps read once); ``typed`` writes a
matrix as a base64 typed array (Plotly's form) instead of a JSON list of lists.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from sqlalchemy import and_, select
from sqlmodel import Session, col

from gradwatch_server.models import SeriesBlob, SeriesChunk
from gradwatch_server.read.series import unpack

Vector = np.ndarray[Any, Any]


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
    steps, grids = heatmaps(session, run_id, optimizer, [stat], points)
    return steps, grids[stat].astype(np.float64)


def heatmaps(
    session: Session, run_id: str, optimizer: int, stats: list[str], points: int
) -> tuple[Vector, dict[str, Vector]]:
    """(first step of each column, stat → ``(tensors, columns)`` maxima): ``heatmap`` of
    each statistic in ``stats``, in the same columns, the block steps read once. Every
    chunk holds every statistic, so their blocks are the same; where one cannot be read
    (noted as a problem), its blocks are left out of every statistic."""
    what = f"max:steps of run {run_id}"
    firsts = {}
    for seq, data, _, _ in _read(session, run_id, optimizer, "max:steps"):
        found = unpack(data, "i8", 1, len(data) // 8, what)
        if found is not None:
            firsts[seq] = found[0]
    blocks = {stat: _blocks(session, run_id, optimizer, stat, firsts) for stat in stats}
    out = {stat: np.zeros((0, 0)) for stat in stats}  # a statistic not recorded: empty
    recorded = [steps for steps, _ in blocks.values() if len(steps)]
    common = recorded[0] if recorded else np.zeros(0, dtype=np.int64)
    for steps in recorded[1:]:
        if not np.array_equal(steps, common):
            common = np.intersect1d(common, steps)
    if not len(common):
        return np.zeros(0, dtype=np.int64), out
    per = -(-len(common) // max(points, 1))
    starts = np.arange(0, len(common), per)
    for stat, (steps, values) in blocks.items():
        if not len(steps):
            continue
        if not np.array_equal(steps, common):
            _, keep = np.unique(steps, return_index=True)
            keep = keep[np.isin(steps[keep], common)]
            values = values[:, keep]
        out[stat] = np.maximum.reduceat(values, starts, axis=1)  # the stored dtype (f4)
    return common[starts], out


def _blocks(
    session: Session, run_id: str, optimizer: int, stat: str, firsts: dict[int, Vector]
) -> tuple[Vector, Vector]:
    """(first step of each block, ``(tensors, blocks)`` maxima) of ``max:<stat>``, by step."""
    what = f"max:{stat} of run {run_id}"
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
    values = np.concatenate(value_parts, axis=1)
    if np.all(steps[1:] >= steps[:-1]):  # chunks stored in step order: no reordering copy
        return steps, values
    order = np.argsort(steps, kind="stable")
    return steps[order], values[:, order]


def typed(values: Vector) -> dict[str, Any]:
    """A matrix as a typed array: ``{"dtype": "f4" or "f8", "shape": [rows, columns], "bdata":
    base64 of its little-endian bytes}`` (Plotly's form): every value exact, NaN and ±Inf
    included, without writing (and parsing) a decimal number per cell. float32 statistics
    stay float32 (half the bytes); anything else is sent as float64."""
    kind = "f4" if values.dtype == np.float32 else "f8"
    data = np.ascontiguousarray(values, dtype=f"<{kind}")
    return {
        "dtype": kind,
        "shape": list(data.shape),
        "bdata": base64.b64encode(data.tobytes()).decode("ascii"),
    }
