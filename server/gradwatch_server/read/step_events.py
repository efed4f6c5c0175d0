"""A run's optimizer lifecycle per step, read from the chunk store (a bounded window).

Each STEPS chunk keeps, per step, the ordered events the collector saw since the previous
step: ``backward``, ``zero_grad``, ``grad_modified``, ``skipped``, ``dropped`` and the
closing ``step``, each ``[kind, seconds since the previous step ended, detail]``, plus the
number of backward passes. ``lifecycle`` returns at most ``limit`` consecutive steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import and_, select
from sqlmodel import Session, col

from gradwatch_server.jsontext import load_json
from gradwatch_server.models import SeriesBlob, SeriesChunk
from gradwatch_server.problems import note


def window(last_step: int, start: int | None, end: int | None, limit: int) -> tuple[int, int]:
    """The step range to read: the last ``limit`` steps unless ``start``/``end`` say otherwise."""
    if start is None and end is None:
        end = last_step
    if start is None:
        assert end is not None
        return max(end - limit + 1, 0), end
    return start, min(end if end is not None else start + limit - 1, start + limit - 1)


def lifecycle(
    session: Session, run_id: str, optimizer: int, start: int, end: int
) -> list[dict[str, Any]]:
    """``{step, n_backward, events}`` for every recorded step in ``[start, end]``, by step."""
    query = (
        select(col(SeriesChunk.steps), col(SeriesChunk.meta), col(SeriesBlob.data))
        .outerjoin(
            SeriesBlob,
            and_(
                col(SeriesBlob.run_id) == col(SeriesChunk.run_id),
                col(SeriesBlob.seq) == col(SeriesChunk.seq),
                col(SeriesBlob.name) == "n_backward",
            ),
        )
        .where(
            col(SeriesChunk.run_id) == run_id,
            col(SeriesChunk.optimizer) == optimizer,
            col(SeriesChunk.step_last) >= start,
            col(SeriesChunk.step_first) <= end,
        )
    )
    rows: list[dict[str, Any]] = []
    for steps_raw, meta_text, backward_raw in session.execute(query):
        steps = np.frombuffer(steps_raw, dtype="<i8")
        events = _events(load_json(meta_text), len(steps))
        passes = _passes(backward_raw, len(steps))
        for i, step in enumerate(steps.tolist()):
            if start <= step <= end:
                rows.append({"step": step, "n_backward": passes[i], "events": events[i]})
    rows.sort(key=lambda r: int(r["step"]))
    return rows


def _events(meta: Any, n: int) -> list[list[Any]]:
    """Each step's event lists; a step whose stored events are unreadable gets none (noted)."""
    events = meta.get("events") if isinstance(meta, dict) else None
    if events is None:
        return [[] for _ in range(n)]
    if not isinstance(events, list):
        events = []
    out = [
        e if isinstance(e, list) and all(isinstance(x, list) for x in e) else None for e in events
    ]
    if len(out) != n or None in out:
        note(f"the lifecycle events of {n} steps are stored damaged; those steps show none")
    return [(out[i] if i < len(out) else None) or [] for i in range(n)]


def _passes(raw: bytes | None, n: int) -> list[int | None]:
    if raw is None or len(raw) != 4 * n:
        return [None] * n
    return [int(x) for x in np.frombuffer(raw, dtype="<i4")]
