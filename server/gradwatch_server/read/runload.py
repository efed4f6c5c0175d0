"""A stored run as the comparison core's :class:`gradwatch.core.drift.verdict.RunData` (numpy).

Reads the chunk store (``series_chunks`` / ``series_blobs``) for a step range: the loss,
the per-tensor statistics and the batch hashes (kept in each STEPS chunk's meta), so the
live comparison reads only the steps it has not compared yet.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlmodel import Session, col

from gradwatch.core.contract import STAT_NAMES
from gradwatch.core.drift.verdict import RunData, Track
from gradwatch_server.jsontext import load_json
from gradwatch_server.models import Run, SeriesChunk
from gradwatch_server.read import runs
from gradwatch_server.read.series import INT64_MAX, INT64_MIN, read_block, tensor_rows


def optimizers(session: Session, run_id: str) -> list[int]:
    """The optimizer indices with stored steps."""
    query = (
        select(col(SeriesChunk.optimizer))
        .where(col(SeriesChunk.run_id) == run_id, col(SeriesChunk.optimizer) >= 0)
        .distinct()
    )
    return sorted(int(o) for o in session.execute(query).scalars())


def _batch_hashes(
    session: Session, run_id: str, optimizer: int, lo: int, hi: int
) -> dict[int, str | None]:
    query = select(col(SeriesChunk.steps), col(SeriesChunk.meta)).where(
        col(SeriesChunk.run_id) == run_id,
        col(SeriesChunk.optimizer) == optimizer,
        col(SeriesChunk.step_last) >= lo,
        col(SeriesChunk.step_first) <= hi,
    )
    out: dict[int, str | None] = {}
    for raw, meta in session.execute(query):
        stored = json.loads(meta)
        hashes = stored.get("batch_hash") if isinstance(stored, dict) else None
        if not isinstance(hashes, list):  # absent, or stored damaged: no batch identity
            hashes = []
        steps = np.frombuffer(raw, dtype="<i8").tolist()
        for step, value in zip(steps, hashes, strict=False):
            out[int(step)] = value if isinstance(value, str) else None
    return out


Vector = np.ndarray[Any, Any]


def _floats(values: Vector) -> Vector:
    return np.ascontiguousarray(values, dtype=np.float64)


def _track(
    session: Session, run_id: str, opt: int, names: list[str], lo: int, hi: int
) -> Track | None:
    loss = read_block(session, run_id, opt, "loss", None, lo, hi)
    if loss.steps.size == 0:
        return None
    has = read_block(session, run_id, opt, "has_loss", None, lo, hi)
    n = loss.steps.size
    stats: dict[str, Vector] = {}
    for name in STAT_NAMES:
        block = read_block(session, run_id, opt, f"stat:{name}", None, lo, hi)
        if block.steps.size != n:
            return None  # a chunk without statistics: not comparable step by step
        stats[name] = _floats(block.values)
    width = int(stats["grad_norm"].shape[0])
    hashes = _batch_hashes(session, run_id, opt, lo, hi)
    steps = loss.steps.tolist()
    return Track(
        tensors=names[:width] if len(names) >= width else [str(i) for i in range(width)],
        steps=np.array(steps, dtype=np.int64),
        loss=_floats(loss.values[0]),
        has_loss=has.values[0] != 0 if has.steps.size == n else np.ones(n, dtype=np.bool_),
        stats=stats,
        batch=[hashes.get(int(s)) for s in steps],
    )


def load_run_data(
    session: Session, run: Run, start: int | None = None, end: int | None = None
) -> RunData:
    """The run's fingerprint and its steps in ``[start, end]`` (all when None)."""
    lo = INT64_MIN if start is None else start
    hi = INT64_MAX if end is None else end
    rows = tensor_rows(load_json(run.start_meta) or {})
    data = RunData(run.id, runs.fingerprint(session, run_id=run.id))
    for opt in optimizers(session, run.id):
        names = [
            n
            for n, _ in sorted(
                ((n, r) for n, (o, r) in rows.items() if o == opt), key=lambda item: item[1]
            )
        ]
        track = _track(session, run.id, opt, names, lo, hi)
        if track is not None:
            data.tracks[opt] = track
    return data


def loss_series(session: Session, run_id: str) -> tuple[Vector, Vector]:
    """(steps, loss) of optimizer 0 where a loss was logged."""
    loss = read_block(session, run_id, 0, "loss", None)
    if not loss.steps.size:  # a run of the sweep that has no steps yet
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    has = read_block(session, run_id, 0, "has_loss", None)
    keep = has.values[0] != 0 if has.steps.size == loss.steps.size else slice(None)
    return loss.steps[keep].astype(np.int64), _floats(loss.values[0][keep])
