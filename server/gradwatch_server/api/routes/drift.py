"""Drift across repeated runs: compare two runs, replicate groups, baselines, envelopes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query
from sqlalchemy.engine import Engine
from sqlmodel import Session

from gradwatch_server.api.deps import EngineDep, ReadAccess, SessionDep, WriteAccess, project_filter
from gradwatch_server.auth import Access
from gradwatch_server.db import write_session
from gradwatch_server.drift import comparison
from gradwatch_server.exceptions import RequestError
from gradwatch_server.jsonresp import GWJSONResponse
from gradwatch_server.read import groups
from gradwatch_server.read.runs import get_run_row
from gradwatch_server.schemas import (
    ComparePublic,
    EnvelopePublic,
    GroupPublic,
    GroupsPublic,
    error_replies,
)

router = APIRouter(tags=["drift"])
_ERRORS = error_replies(401, 403, 404, 422)
Tolerance = Annotated[float | None, Query(ge=0.0, le=1e6)]
Key = Annotated[str, Path(max_length=600, description="group key '<config_hash>:<code_hash>'")]


@router.get("/compare", response_model=ComparePublic, responses=_ERRORS)
def get_compare(
    session: SessionDep,
    access: ReadAccess,
    a: Annotated[str, Query(max_length=128, description="run id of the first run")],
    b: Annotated[str, Query(max_length=128, description="run id of the second run")],
    rtol: Tolerance = None,
    atol: Tolerance = None,
) -> GWJSONResponse:
    """The comparison of two runs (what ``gradwatch compare A B --json`` prints): verdict,
    first divergent step, metric and tensor, cause, difference, fingerprint difference."""
    runs = [get_run_row(session, run_id, access)[0] for run_id in (a, b)]
    return GWJSONResponse(comparison.compare_runs(session, runs[0], runs[1], rtol=rtol, atol=atol))


@router.get("/groups", response_model=GroupsPublic, responses=_ERRORS)
def list_groups(
    session: SessionDep,
    access: ReadAccess,
    project: Annotated[str | None, Query(max_length=256)] = None,
    offset: Annotated[int, Query(ge=0, le=1 << 31)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> GWJSONResponse:
    """Replicate groups (same config hash and code hash), most recently started first."""
    project = project_filter(access, project)
    keys, count = groups.list_keys(session, project=project, offset=offset, limit=limit)
    data = [groups.describe(session, key, name) for name, key in keys]
    return GWJSONResponse({"data": data, "count": count})


def _group(session: SessionDep, access: Access, key: str, scope: str) -> dict[str, Any]:
    found = groups.describe(session, key, access.project)
    access.check(found["project"], scope)
    return found


@router.get("/groups/{key}", response_model=GroupPublic, responses=_ERRORS)
def get_group(key: Key, session: SessionDep, access: ReadAccess) -> GWJSONResponse:
    """One group: its runs, baseline, reference, seeds and flagged runs."""
    return GWJSONResponse(_group(session, access, key, "read"))


@router.put("/groups/{key}/baseline", response_model=GroupPublic, responses=_ERRORS)
def pin_baseline(
    key: Key,
    session: SessionDep,
    engine: EngineDep,
    access: WriteAccess,
    run: Annotated[str, Body(embed=True, max_length=128)],
) -> GWJSONResponse:
    """Pin the run that the group's live comparison uses as its reference."""
    found = _group(session, access, key, "write")
    row, project = get_run_row(session, run, access, "write")
    if project != found["project"]:  # an open server's group key may span projects
        raise RequestError(
            422, f"run {run[:130]!r} is not in group {key[:80]!r} of project {found['project']!r}"
        )
    with write_session(engine) as writer:
        groups.pin(writer, key=key, run=row)
    return _fresh(engine, key, found["project"])


@router.delete("/groups/{key}/baseline", response_model=GroupPublic, responses=_ERRORS)
def unpin_baseline(
    key: Key, session: SessionDep, engine: EngineDep, access: WriteAccess
) -> GWJSONResponse:
    """Forget the pinned baseline: the reference is automatic again."""
    found = _group(session, access, key, "write")
    first, _ = get_run_row(session, found["runs"][0], access, "write")
    with write_session(engine) as writer:
        groups.unpin(writer, project_id=first.project_id, key=key)
    return _fresh(engine, key, found["project"])


def _fresh(engine: Engine, key: str, project: str) -> GWJSONResponse:
    """The group read after a write (the request's session may hold an older snapshot)."""
    with Session(engine) as session:
        return GWJSONResponse(groups.describe(session, key, project))


@router.get("/groups/{key}/envelope", response_model=EnvelopePublic, responses=_ERRORS)
def get_envelope(
    key: Key,
    session: SessionDep,
    access: ReadAccess,
    points: Annotated[int, Query(ge=2, le=100_000)] = 1000,
) -> GWJSONResponse:
    """The loss envelope of the group's seed sweep (one run per seed): median ± 4 robust
    standard deviations per step, and which runs leave it."""
    found = _group(session, access, key, "read")
    return GWJSONResponse(comparison.group_envelope(session, key, found["runs"], points))
