"""Queries behind the runs and findings API (keyword-only functions over a session); no HTTP
here."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session, col

from gradwatch.core.confirm import confirmation, confirming_checks
from gradwatch.core.incidents import views
from gradwatch.core.records import merge_fingerprints
from gradwatch_server.auth import Access
from gradwatch_server.exceptions import RequestError
from gradwatch_server.groupkey import group_key
from gradwatch_server.jsontext import load_json, tagged
from gradwatch_server.models import Finding, Fingerprint, Project, Run, RunTag
from gradwatch_server.read import groups
from gradwatch_server.read.status import StatusPolicy, run_status
from gradwatch_server.schemas import FindingCounts, FindingPublic, RunDetail, RunPublic


def list_runs(
    session: Session,
    *,
    policy: StatusPolicy,
    project: str | None = None,
    status: str | None = None,
    tag: str | None = None,
    config_hash: str | None = None,
    group: str | None = None,
    ddp_group: str | None = None,
    job: str | None = None,
    offset: int = 0,
    limit: int = 100,
) -> tuple[list[RunPublic], int]:
    """A page of runs matching the filters (newest first) and the total count."""
    query = select(Run, col(Project.name)).join(Project, col(Project.id) == col(Run.project_id))
    if project is not None:
        query = query.where(col(Project.name) == project)
    if config_hash is not None:
        query = query.where(col(Run.config_hash) == config_hash)
    if group is not None:
        query = query.where(groups.in_group(group))
    if ddp_group is not None:
        query = query.where(col(Run.group_id) == ddp_group)
    if job is not None:
        query = query.where(col(Run.job_id) == job)
    if tag is not None:
        tagged = select(col(RunTag.run_id)).where(col(RunTag.tag) == tag)
        query = query.where(col(Run.id).in_(tagged))
    query = query.order_by(col(Run.started_at).desc(), col(Run.id).desc())
    now = time.time()
    rows = [(run, name, run_status(run, policy, now)) for run, name in session.execute(query)]
    if status is not None:
        rows = [r for r in rows if r[2] == status]
    page = rows[offset : offset + limit]
    ids = [run.id for run, _, _ in page]
    counts, tags = _finding_counts(session, ids), _tags(session, ids)
    seeds = groups.seeds(session, ids)
    data = [
        _public(run, name, st, counts.get(run.id), tags.get(run.id), seeds.get(run.id))
        for run, name, st in page
    ]
    return data, len(rows)


def _public(
    run: Run,
    project: str,
    status: str,
    counts: FindingCounts | None,
    tags: list[str] | None,
    seed: int | None = None,
) -> RunPublic:
    return RunPublic(
        id=run.id,
        name=run.name or run.id,
        project=project,
        status=status,
        steps=run.steps,
        config_hash=run.config_hash,
        code_hash=run.code_hash,
        tags=tags or [],
        host=run.host,
        pid=run.pid,
        started=run.started_at,
        ended=run.ended_at,
        last_seen=run.last_t,
        frames=run.frames,
        findings=counts or FindingCounts(),
        group=group_key(run.config_hash, run.code_hash),
        seed=seed,
        ddp_group=run.group_id,
        rank=run.rank,
        world_size=run.world_size,
        job=run.job_id or run.group_id or run.id,
    )


def _finding_counts(session: Session, ids: Sequence[str]) -> dict[str, FindingCounts]:
    if not ids:
        return {}
    query = (
        select(col(Finding.run_id), col(Finding.severity), func.count())
        .where(col(Finding.run_id).in_(ids))
        .group_by(col(Finding.run_id), col(Finding.severity))
    )
    out: dict[str, FindingCounts] = {}
    for run_id, severity, n in session.execute(query):
        setattr(out.setdefault(run_id, FindingCounts()), severity, int(n))
    return out


def _tags(session: Session, ids: Sequence[str]) -> dict[str, list[str]]:
    if not ids:
        return {}
    query = select(col(RunTag.run_id), col(RunTag.tag)).where(col(RunTag.run_id).in_(ids))
    out: dict[str, list[str]] = {}
    for run_id, tag in session.execute(query.order_by(col(RunTag.tag))):
        out.setdefault(run_id, []).append(tag)
    return out


def get_run_row(
    session: Session, run_id: str, access: Access, scope: str = "read"
) -> tuple[Run, str]:
    """The run and its project name, or 404 for an unknown run *and* for a run of a
    project the caller cannot see (the same reply, naming no project: ids and project
    names cannot be probed); 403 only for the wrong scope on the caller's own project."""
    row = session.execute(
        select(Run, col(Project.name))
        .join(Project, col(Project.id) == col(Run.project_id))
        .where(col(Run.id) == run_id)
    ).first()
    if row is None or not access.sees(str(row[1])):
        raise RequestError(404, f"no run {run_id[:130]!r}; list runs with GET /api/v1/runs")
    access.check(str(row[1]), scope)
    return row[0], str(row[1])


def public_run(session: Session, *, run: Run, project: str, policy: StatusPolicy) -> RunPublic:
    """One run as the list shows it."""
    return _public(
        run,
        project,
        run_status(run, policy, time.time()),
        _finding_counts(session, [run.id]).get(run.id),
        _tags(session, [run.id]).get(run.id),
        groups.seeds(session, [run.id]).get(run.id),
    )


def get_run(session: Session, *, run: Run, project: str, policy: StatusPolicy) -> RunDetail:
    """A run with its start record, merged fingerprint and end record."""
    public = public_run(session, run=run, project=project, policy=policy)
    return RunDetail(
        **public.model_dump(),
        start=tagged(load_json(run.start_meta) or {}),
        fingerprint=tagged(fingerprint(session, run_id=run.id)),
        end=tagged(load_json(run.end_meta)),
    )


def fingerprint(session: Session, *, run_id: str) -> dict[str, Any]:
    """The run's FINGERPRINT records merged by the one rule,
    :func:`gradwatch.core.records.merge_fingerprints` (fast phase first, then slow, by seq)."""
    query = select(Fingerprint).where(col(Fingerprint.run_id) == run_id)
    rows = session.execute(query).scalars()
    return merge_fingerprints((row.phase, row.seq, load_json(row.data)) for row in rows)


def findings(
    session: Session,
    *,
    run_id: str,
    severity: str | None = None,
    check: str | None = None,
    offset: int = 0,
    limit: int = 1000,
) -> tuple[list[FindingPublic], int]:
    """A page of a run's findings in (step, seq) order, and their total count."""
    query = select(Finding).where(col(Finding.run_id) == run_id)
    if severity is not None:
        query = query.where(col(Finding.severity) == severity)
    if check is not None:
        query = query.where(col(Finding.check) == check)
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    ordered = query.order_by(col(Finding.step), col(Finding.seq), col(Finding.idx))
    rows = session.execute(ordered.offset(offset).limit(limit)).scalars().all()
    out = [_finding(f) for f in rows]
    lint = [f for f in out if f.source == "lint"]
    if lint:
        runtime = _confirming(session, run_id, {f.check for f in lint})
        for f in lint:
            f.confirmed_by = confirmation(f.check, runtime)
            f.confirmed = f.confirmed_by is not None
    return out, int(total)


def _confirming(session: Session, run_id: str, rules: set[str]) -> list[dict[str, Any]]:
    """The run's runtime findings that could confirm lint findings of ``rules``."""
    checks = confirming_checks(rules)
    if not checks:
        return []
    query = select(col(Finding.check), col(Finding.step), col(Finding.details)).where(
        col(Finding.run_id) == run_id,
        col(Finding.source) == "runtime",
        col(Finding.check).in_(sorted(checks)),
    )
    return [
        {"check": c, "step": step, "details": load_json(d) or {}, "source": "runtime"}
        for c, step, d in session.execute(query).all()
    ]


def _finding(f: Finding) -> FindingPublic:
    return FindingPublic(
        run=f.run_id,
        check=f.check,
        severity=f.severity,
        step=f.step,
        optimizer=f.optimizer,
        param=f.param,
        message=f.message,
        hint=f.hint,
        details=tagged(load_json(f.details) or {}),
        t=tagged(load_json(f.t)),
        source=f.source,
        incident=f.incident,
        role=f.role,
    )


def incidents(session: Session, run_id: str) -> list[dict[str, Any]]:
    """The run's findings as incidents (:func:`gradwatch.core.incidents.views`), each with its
    sentence; every finding of the run is read (findings are onsets, so they are few)."""
    found, _ = findings(session, run_id=run_id, limit=1 << 30)
    return [
        {
            "id": view.id,
            "severity": view.severity,
            "sentence": view.sentence(),
            "cause": view.cause,
            "consequences": view.consequences,
        }
        for view in views([f.model_dump() for f in found])
    ]
