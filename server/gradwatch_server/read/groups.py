"""Replicate groups: runs of one project with the same config hash and code hash.

A group's key is ``"<config_hash>:<code_hash>"`` (``none`` for a missing code hash; see
:mod:`gradwatch_server.groupkey`); groups exist implicitly. The live comparison's
*reference* for a run is the group's pinned baseline (which itself is compared with
nothing), else the oldest finished run of the group that started before it, in both
cases with the same torch seed: runs with different seeds form a seed sweep, which the
envelope watches instead (see :mod:`gradwatch_server.drift.live`).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import and_, delete, func, select
from sqlmodel import Session, col

from gradwatch.core import checkids
from gradwatch_server.exceptions import RequestError
from gradwatch_server.groupkey import group_key, parse_key
from gradwatch_server.models import DriftState, Finding, GroupBaseline, Project, Run
from gradwatch_server.store import insert_ignore


def in_group(key: str) -> Any:
    """A WHERE clause selecting the runs of group ``key``."""
    config, code = parse_key(key)
    code_clause = col(Run.code_hash).is_(None) if code is None else col(Run.code_hash) == code
    return and_(col(Run.config_hash) == config, code_clause)


def group_runs(session: Session, key: str, project: str | None = None) -> list[tuple[Run, str]]:
    """The group's runs (oldest first) with their project names."""
    query = (
        select(Run, col(Project.name))
        .join(Project, col(Project.id) == col(Run.project_id))
        .where(in_group(key))
        .order_by(col(Run.started_at), col(Run.id))
    )
    if project is not None:
        query = query.where(col(Project.name) == project)
    return [(run, str(name)) for run, name in session.execute(query)]


def list_keys(
    session: Session, *, project: str | None, offset: int, limit: int
) -> tuple[list[tuple[str, str]], int]:
    """A page of (project, key) of groups, most recently started first, and their count."""
    query = (
        select(
            col(Project.name), col(Run.config_hash), col(Run.code_hash), func.max(Run.started_at)
        )
        .join(Project, col(Project.id) == col(Run.project_id))
        .where(col(Run.config_hash).is_not(None))
        .group_by(col(Project.name), col(Run.config_hash), col(Run.code_hash))
    )
    if project is not None:
        query = query.where(col(Project.name) == project)
    rows = list(session.execute(query))
    rows.sort(key=lambda r: (r[3] is None, -(r[3] or 0.0)))
    keys = [(str(r[0]), str(group_key(r[1], r[2]))) for r in rows]
    return keys[offset : offset + limit], len(keys)


def baseline(session: Session, project_id: int, key: str) -> str | None:
    """The pinned baseline run of a group, if any."""
    row = session.get(GroupBaseline, (project_id, key))
    return None if row is None else row.run_id


def pin(session: Session, *, key: str, run: Run) -> None:
    """Pin ``run`` as its group's baseline (422 when it is not in the group)."""
    if group_key(run.config_hash, run.code_hash) != key:
        raise RequestError(422, f"run {run.id!r} is not in group {key[:80]!r}")
    unpin(session, project_id=run.project_id, key=key)
    row = {"project_id": run.project_id, "group_key": key, "run_id": run.id}
    insert_ignore(session, GroupBaseline, [row | {"pinned_at": time.time()}])


def unpin(session: Session, *, project_id: int, key: str) -> None:
    """Forget a group's pinned baseline."""
    session.execute(
        delete(GroupBaseline).where(
            col(GroupBaseline.project_id) == project_id, col(GroupBaseline.group_key) == key
        )
    )


def seeds(session: Session, run_ids: list[str]) -> dict[str, int | None]:
    """The torch seed of each run the live comparison has seen (None if not user-set)."""
    if not run_ids:
        return {}
    query = select(col(DriftState.run_id), col(DriftState.seed)).where(
        col(DriftState.run_id).in_(run_ids)
    )
    return {str(r): (None if s is None else int(s)) for r, s in session.execute(query)}


def reference(session: Session, run: Run, seed: int | None) -> str | None:
    """The run that ``run`` is compared with live, or None (see the module docstring)."""
    key = group_key(run.config_hash, run.code_hash)
    if key is None or seed is None:
        return None
    pinned = baseline(session, run.project_id, key)
    if pinned == run.id:
        return None  # the baseline is what the others are compared with
    if pinned is not None and seeds(session, [pinned]).get(pinned) == seed:
        return pinned
    query = (
        select(col(Run.id))
        .join(DriftState, col(DriftState.run_id) == col(Run.id))
        .where(
            in_group(key),
            col(Run.project_id) == run.project_id,
            col(Run.id) != run.id,
            col(Run.end_status) == "finished",
            col(DriftState.seed) == seed,
        )
        .order_by(col(Run.started_at), col(Run.id))
    )
    oldest = session.execute(query.limit(1)).scalar_one_or_none()
    other = None if oldest is None else session.get(Run, oldest)
    if other is None or (other.started_at or 0.0, other.id) >= (run.started_at or 0.0, run.id):
        return None
    return other.id


def runs_with_check(session: Session, run_ids: list[str], check: str) -> list[str]:
    """The runs among ``run_ids`` that have a finding of ``check``."""
    if not run_ids:
        return []
    query = (
        select(col(Finding.run_id))
        .where(col(Finding.run_id).in_(run_ids), col(Finding.check) == check)
        .distinct()
    )
    found = {str(r) for r in session.execute(query).scalars()}
    return [r for r in run_ids if r in found]


def describe(session: Session, key: str, project: str | None = None) -> dict[str, Any]:
    """The public ``Group`` object (404 when no run has this key)."""
    members = group_runs(session, key, project)
    if not members:
        raise RequestError(404, f"no group {key[:80]!r}; list groups with GET /api/v1/groups")
    first, project_name = members[0]
    ids = [run.id for run, _ in members]
    seed_of = seeds(session, ids)
    newest = max((run for run, _ in members), key=lambda r: (r.started_at or 0.0, r.id))
    config, code = parse_key(key)
    return {
        "key": key,
        "project": project_name,
        "config_hash": config,
        "code_hash": code,
        "runs": ids,
        "count": len(ids),
        "baseline": baseline(session, first.project_id, key),
        "reference": reference(session, newest, seed_of.get(newest.id)),
        "seeds": sorted({s for s in seed_of.values() if s is not None}),
        "drifted": runs_with_check(session, ids, checkids.REPRO_DRIFT),
        "outside_envelope": runs_with_check(session, ids, checkids.SEED_ENVELOPE),
        "last_started": newest.started_at,
    }
