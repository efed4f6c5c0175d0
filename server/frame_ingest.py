"""Ingest: the one function that stores frames, used by HTTP and by the spool import.

Idempotency: in the same transaction as the data, every frame's ``(run, seq)`` is inserted
into ``ingested_frames`` with ``ON CONFLICT DO NOTHING ... RETURNING seq``; only the frames
that come back are stored. A replay, a reordering or a concurrent duplicate from another
server process therefore stores each frame exactly once (on PostgreSQL the second inserter
waits on the unique key until the first commits, then sees the conflict). Run columns are
updated with order-independent expressions (maxima, the RUN_START/END record's values).

Example::

    result = ingest_frames(session, "20261130T0245-3f9a", scan_frames(body).frames)
    result.accepted, result.duplicates
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, case, select, update
from sqlalchemy.sql import ColumnElement
from sqlmodel import Session, col

from gradwatch.contract import DEFAULT_PROJECT
from gradwatch.server.alerting import raise_alerts
from gradwatch.server.exceptions import RequestError
from gradwatch.server.frame_rows import FrameRows, RunDelta, parse_frame
from gradwatch.server.models import RUN_ID_MAX, Finding, IngestedFrame, Project, Run, RunTag
from gradwatch.server.store import ensure_project, insert_ignore
from gradwatch.wire import Frame

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class IngestResult:
    """What one ingest call did."""

    run: str
    accepted: int
    duplicates: int
    project: str


def check_run_id(run_id: str | None) -> str:
    """The run id from the header, or ``RequestError(400)`` saying what is allowed."""
    if not run_id:
        raise RequestError(
            400, "missing X-Gradwatch-Run header: it must name the run (its folder name)"
        )
    if len(run_id) > RUN_ID_MAX or not RUN_ID_RE.match(run_id):
        raise RequestError(
            400,
            f"bad run id {run_id[:80]!r}: use 1-{RUN_ID_MAX} characters of A-Z a-z 0-9 . _ - "
            "starting with a letter or digit",
        )
    return run_id


def parse_frames(run_id: str, frames: list[Frame]) -> list[FrameRows]:
    """Validate every frame (all or nothing); duplicate seqs within one body count once."""
    parsed: dict[int, FrameRows] = {}
    for frame in frames:
        if frame.seq not in parsed:
            parsed[frame.seq] = parse_frame(run_id, frame)
    return list(parsed.values())


def start_project(parsed: list[FrameRows]) -> str | None:
    """The project named by the batch's RUN_START, if it has one."""
    for rows in parsed:
        if rows.delta.start is not None:
            return str(rows.delta.start["project"])
    return None


_STORED_PROJECT = (
    select(col(Project.name))
    .join(Run, col(Run.project_id) == col(Project.id))
    .where(col(Run.id) == bindparam("run_id"))
)


def stored_project(session: Session, run_id: str) -> str | None:
    """The project of the stored run, or None for a new run."""
    found = session.execute(_STORED_PROJECT, {"run_id": run_id}).scalar_one_or_none()
    return None if found is None else str(found)


def ingest_frames(
    session: Session, run_id: str, parsed: list[FrameRows], project: str | None
) -> IngestResult:
    """Store the frames not stored yet; call inside a write transaction."""
    project = project or DEFAULT_PROJECT
    project_id = ensure_project(session, project)
    now = time.time()
    insert_ignore(session, Run, [{"id": run_id, "project_id": project_id, "received_at": now}])
    parsed = sorted(parsed, key=lambda r: r.seq)  # one lock order for concurrent writers
    keys = [
        {"run_id": run_id, "seq": r.seq, "kind": int(r.kind), "received_at": now} for r in parsed
    ]
    new = set(insert_ignore(session, IngestedFrame, keys, returning="seq")) if keys else set()
    fresh = [r for r in parsed if r.seq in new]
    by_model: dict[type, list[dict[str, Any]]] = {}
    delta = RunDelta()
    for rows in fresh:
        for model, items in rows.rows.items():
            by_model.setdefault(model, []).extend(items)
        delta.merge(rows.delta)
    for model, items in by_model.items():
        insert_ignore(session, model, items)
    _update_run(session, run_id, delta, len(fresh), now)
    if delta.start is not None:
        moved = ensure_project(session, delta.start["project"])
        session.execute(update(Run).where(col(Run.id) == run_id).values(project_id=moved))
        tags = [{"run_id": run_id, "tag": t} for t in dict.fromkeys(delta.start["tags"])]
        if tags:
            insert_ignore(session, RunTag, tags)
    if by_model.get(Finding):
        raise_alerts(session, run_id, by_model[Finding])
    return IngestResult(run_id, len(fresh), len(parsed) - len(fresh), project)


def _greatest(column: Any, value: Any) -> ColumnElement[Any]:
    return case((column.is_(None), value), (column < value, value), else_=column)


# The run's columns that a RUN_START / an END record sets: key in ``RunDelta.start`` /
# ``RunDelta.end`` -> column of ``Run``.
_START_COLUMNS = {
    "name": "name",
    "config_hash": "config_hash",
    "started_at": "started_at",
    "pid": "pid",
    "host": "host",
    "group_id": "group_id",
    "rank": "rank",
    "world_size": "world_size",
    "job_id": "job_id",
    "meta": "start_meta",
}
_END_COLUMNS = {"status": "end_status", "ended_at": "ended_at", "meta": "end_meta"}


def _update_run(session: Session, run_id: str, delta: RunDelta, accepted: int, now: float) -> None:
    values: dict[Any, Any] = {
        col(Run.received_at): now,
        col(Run.frames): col(Run.frames) + accepted,
    }
    if delta.steps is not None:
        values[col(Run.steps)] = _greatest(col(Run.steps), delta.steps)
    if delta.last_t is not None:
        values[col(Run.last_t)] = _greatest(col(Run.last_t), delta.last_t)
    if delta.code_hash is not None:
        values[col(Run.code_hash)] = delta.code_hash
    for record, columns in ((delta.start, _START_COLUMNS), (delta.end, _END_COLUMNS)):
        if record is not None:
            values.update({col(getattr(Run, c)): record[k] for k, c in columns.items()})
    session.execute(update(Run).where(col(Run.id) == run_id).values(values))
