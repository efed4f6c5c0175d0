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
from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from gradwatch.core.contract import DEFAULT_PROJECT
from gradwatch.core.wire import MAGIC, SCHEMA_VERSION, Frame, scan_frames
from gradwatch_server.alerts.rules import raise_alerts
from gradwatch_server.exceptions import RequestError
from gradwatch_server.ingest.frame_rows import FrameRows, RunDelta, parse_frame
from gradwatch_server.models import (
    RUN_ID_MAX,
    Event,
    Finding,
    Fingerprint,
    SeriesBlob,
    SeriesChunk,
)
from gradwatch_server.store import (
    VALUES_ROWS,
    ensure_project,
    insert_ignore,
    insert_returning,
    insert_rows,
    insert_sql,
    run_sql,
)

if TYPE_CHECKING:
    from gradwatch_server.auth import Access

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


def decode_body(body: bytes) -> list[Frame]:
    """The frames of a body, or 400 saying where and how it is damaged."""
    if not body:
        raise RequestError(400, "empty body: send one or more frames (see gradwatch.core.wire)")
    scan = scan_frames(body, resync=False)
    if scan.corrupt_frames or scan.torn_tail_bytes:
        at = scan.end_offset
        if body[at : at + 2] == MAGIC and len(body) > at + 2 and body[at + 2] != SCHEMA_VERSION:
            why = f"has schema version {body[at + 2]}, this server reads {SCHEMA_VERSION}"
        elif scan.torn_tail_bytes:
            why = f"is incomplete ({scan.torn_tail_bytes} bytes, cut short)"
        else:
            why = "is damaged (bad magic, kind, length, CRC or payload)"
        raise RequestError(
            400, f"the frame at byte {at} {why}; no frame of this request was stored"
        )
    return scan.frames


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
    "SELECT projects.name FROM runs JOIN projects ON projects.id = runs.project_id "
    "WHERE runs.id = ?"
)
_FRAME_COLUMNS = ("run_id", "seq", "kind", "received_at")
# the tables of the frames' rows that take complete rows (``insert_rows``); the others go
# through SQLAlchemy (Python-side column defaults, rare kinds)
_RAW_TABLES: dict[type, str] = {
    SeriesChunk: "series_chunks",
    SeriesBlob: "series_blobs",
    Fingerprint: "fingerprints",
    Event: "events",
}
_MOVE_RUN = "UPDATE runs SET project_id = ? WHERE id = ?"
# a new run's row: the model's Python-side defaults written out (plain SQL, see run_sql)
_NEW_RUN = (
    "INSERT INTO runs (id, project_id, name, steps, received_at, frames, start_meta) "
    "VALUES (?, ?, '', 0, ?, 0, '{}') ON CONFLICT DO NOTHING"
)


def authorised_project(access: Access, run_id: str, named: str | None, stored: str | None) -> str:
    """The project a batch of run ``run_id`` is stored under, after the caller's checks:
    404 for a stored run of a project the caller cannot see (saying nothing of its
    project), 403 unless the caller may write to that project (and to the stored one,
    when a RUN_START moves the run)."""
    if stored is not None and not access.sees(stored):
        raise RequestError(
            404, f"no run {run_id!r} that this token may write to; use another run id"
        )
    project = named or stored or access.project or DEFAULT_PROJECT
    access.check(project, "write")
    if stored is not None and stored != project:
        access.check(stored, "write")
    return project


def stored_project(session: Session, run_id: str) -> str | None:
    """The project of the stored run, or None for a new run."""
    found = run_sql(session, _STORED_PROJECT, (run_id,))
    return None if not found else str(found[0][0])


def ingest_frames(
    session: Session,
    run_id: str,
    parsed: list[FrameRows],
    project: str | None,
    *,
    run_exists: bool = False,
) -> IngestResult:
    """Store the frames not stored yet; call inside a write transaction.

    ``run_exists``: the caller has just seen the run's row in this transaction (its
    project then needs no lookup and the run no insert).
    """
    project = project or DEFAULT_PROJECT
    now = time.time()
    if not run_exists:
        project_id = ensure_project(session, project)
        run_sql(session, _NEW_RUN, (run_id, project_id, now))
    parsed = sorted(parsed, key=lambda r: r.seq)  # one lock order for concurrent writers
    keys = [(run_id, r.seq, int(r.kind), now) for r in parsed]
    new = set(insert_returning(session, "ingested_frames", _FRAME_COLUMNS, keys, "seq"))
    fresh = [r for r in parsed if r.seq in new]
    by_model: dict[type, list[dict[str, Any]]] = {}
    delta = RunDelta()
    for rows in fresh:
        for model, items in rows.rows.items():
            by_model.setdefault(model, []).extend(items)
        delta.merge(rows.delta)
    for model, items in by_model.items():
        table = _RAW_TABLES.get(model)
        if table is not None:
            insert_rows(session, table, items)
        else:
            insert_ignore(session, model, items)
    _update_run(session, run_id, delta, len(fresh), now)
    if delta.start is not None:
        moved = ensure_project(session, delta.start["project"])
        run_sql(session, _MOVE_RUN, (moved, run_id))
        tags = [{"run_id": run_id, "tag": t} for t in dict.fromkeys(delta.start["tags"])]
        if tags:
            insert_rows(session, "run_tags", tags)
    if by_model.get(Finding):
        raise_alerts(session, run_id, by_model[Finding])
    return IngestResult(run_id, len(fresh), len(parsed) - len(fresh), project)


_STORED_PROJECTS = (
    "SELECT runs.id, projects.name FROM runs JOIN projects ON projects.id = runs.project_id "
    "WHERE runs.id IN ({})"
)
_BATCH_FRAME_KEYS = "run_id, seq"


def batchable(parsed: list[FrameRows]) -> bool:
    """Whether a batch can be stored with others (``store_batch``): no RUN_START and only
    rows that go to their tables as they are (STEPS, SCALARS, HEARTBEAT, fingerprints,
    events), so no project is created or moved and no alert raised."""
    return all(
        rows.delta.start is None and all(model in _RAW_TABLES for model in rows.rows)
        for rows in parsed
    )


def store_batch(
    session: Session, items: list[tuple[str, Access, list[FrameRows]]]
) -> list[IngestResult | RequestError | None]:
    """Store the batches of several requests of stored runs with a few statements for all
    of them; call inside a write transaction (and a savepoint: on an exception, roll
    back to it and store each request alone).

    Each item is (run id, the caller's access, its ``batchable`` frames); the run ids are
    distinct. Per item: its ``IngestResult``; the ``RequestError`` (404/403) of
    ``authorised_project``, nothing stored; or None for a run not stored yet (the caller
    stores that one alone, where its run is created). What is stored, and the replies,
    are those of ``ingest_frames`` for each item alone: the frames not stored yet are
    claimed in ``ingested_frames`` (``ON CONFLICT DO NOTHING RETURNING``), only their
    rows are inserted, and each run's columns get the same UPDATE.
    """
    out: list[IngestResult | RequestError | None] = [None] * len(items)
    stored: dict[str, str] = {}
    ids = [run_id for run_id, _, _ in items]
    for i in range(0, len(ids), VALUES_ROWS):
        part = ids[i : i + VALUES_ROWS]
        sql = _STORED_PROJECTS.format(", ".join("?" * len(part)))
        stored.update((str(a), str(b)) for a, b in run_sql(session, sql, part))
    todo: list[tuple[int, str, str, list[FrameRows]]] = []
    for i, (run_id, access, parsed) in enumerate(items):
        project = stored.get(run_id)
        if project is None:
            continue
        try:
            authorised_project(access, run_id, None, project)
        except RequestError as e:
            out[i] = e
            continue
        todo.append((i, run_id, project, sorted(parsed, key=lambda r: r.seq)))
    if not todo:
        return out
    todo.sort(key=lambda item: item[1])  # one lock order for concurrent writers
    now = time.time()
    keys = [(run_id, r.seq, int(r.kind), now) for _, run_id, _, parsed in todo for r in parsed]
    new: set[tuple[str, int]] = set()
    for start in range(0, len(keys), VALUES_ROWS):
        chunk = keys[start : start + VALUES_ROWS]
        sql = insert_sql("ingested_frames", _FRAME_COLUMNS, len(chunk))
        sql += f" RETURNING {_BATCH_FRAME_KEYS}"
        params = [v for k in chunk for v in k]
        new.update((str(a), int(b)) for a, b in run_sql(session, sql, params))
    by_table: dict[str, list[dict[str, Any]]] = {}
    updates: dict[str, list[list[Any]]] = {}
    for i, run_id, project, parsed in todo:
        delta = RunDelta()
        fresh = 0
        for rows in parsed:
            if (run_id, rows.seq) not in new:
                continue
            fresh += 1
            for model, items_ in rows.rows.items():
                by_table.setdefault(_RAW_TABLES[model], []).extend(items_)
            delta.merge(rows.delta)
        sql, params = _run_update(run_id, delta, fresh, now)
        updates.setdefault(sql, []).append(params)
        out[i] = IngestResult(run_id, fresh, len(parsed) - fresh, project)
    for table, rows_ in by_table.items():
        insert_rows(session, table, rows_)
    for sql, many in updates.items():
        run_sql(session, sql, many, many=True)
    return out


_START_COLUMNS = (
    ("name", "name"),
    ("config_hash", "config_hash"),
    ("started_at", "started_at"),
    ("pid", "pid"),
    ("host", "host"),
    ("group_id", "group_id"),
    ("rank", "rank"),
    ("world_size", "world_size"),
    ("job_id", "job_id"),
    ("start_meta", "meta"),
)
_END_COLUMNS = (("end_status", "status"), ("ended_at", "ended_at"), ("end_meta", "meta"))
_UPDATE_SQL: dict[tuple[bool, ...], str] = {}


def _greater(column: str) -> str:
    """``column`` raised to the parameter (given twice) if that is larger, or set if NULL."""
    return f"{column} = CASE WHEN {column} IS NULL OR {column} < ? THEN ? ELSE {column} END"


def _update_run(session: Session, run_id: str, delta: RunDelta, accepted: int, now: float) -> None:
    """One UPDATE of the run's columns: fixed SQL per shape of ``delta`` (see ``run_sql``)."""
    sql, params = _run_update(run_id, delta, accepted, now)
    run_sql(session, sql, params)


def _run_update(run_id: str, delta: RunDelta, accepted: int, now: float) -> tuple[str, list[Any]]:
    """The UPDATE of ``_update_run`` and its parameters."""
    shape = (
        delta.steps is not None,
        delta.last_t is not None,
        delta.code_hash is not None,
        delta.start is not None,
        delta.end is not None,
    )
    sql = _UPDATE_SQL.get(shape)
    if sql is None:
        sets = ["received_at = ?", "frames = frames + ?"]
        sets += [_greater("steps")] if shape[0] else []
        sets += [_greater("last_t")] if shape[1] else []
        sets += ["code_hash = ?"] if shape[2] else []
        sets += [f"{c} = ?" for c, _ in _START_COLUMNS] if shape[3] else []
        sets += [f"{c} = ?" for c, _ in _END_COLUMNS] if shape[4] else []
        sql = _UPDATE_SQL[shape] = f"UPDATE runs SET {', '.join(sets)} WHERE id = ?"
    params: list[Any] = [now, accepted]
    if delta.steps is not None:
        params += [delta.steps, delta.steps]
    if delta.last_t is not None:
        params += [delta.last_t, delta.last_t]
    if delta.code_hash is not None:
        params.append(delta.code_hash)
    if delta.start is not None:
        params += [delta.start[key] for _, key in _START_COLUMNS]
    if delta.end is not None:
        params += [delta.end[key] for _, key in _END_COLUMNS]
    params.append(run_id)
    return sql, params
