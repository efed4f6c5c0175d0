"""A run's structure timeline and a replicate group's invariants
(:mod:`gradwatch_server.read.structure`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from gradwatch_server.api.deps import ReadAccess, SessionDep, project_filter
from gradwatch_server.exceptions import RequestError
from gradwatch_server.jsonresp import GWJSONResponse
from gradwatch_server.problems import collecting
from gradwatch_server.read import groups, runs
from gradwatch_server.read import structure as st
from gradwatch_server.schemas import (
    FindingPublic,
    GroupStructurePublic,
    StructurePublic,
    error_replies,
)

router = APIRouter(tags=["structure"])
_ERRORS = error_replies(401, 403, 404, 422)
Key = Annotated[str, Path(max_length=600, description="group key '<config_hash>:<code_hash>'")]


@router.get("/runs/{run_id}/structure", response_model=StructurePublic, responses=_ERRORS)
def get_structure(
    run_id: str,
    session: SessionDep,
    access: ReadAccess,
    offset: Annotated[int, Query(ge=0, le=1 << 31)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> GWJSONResponse:
    """The run's structure findings by step: what changed at which step (info), the
    safeguards it stopped using (warnings) and where it breaks its replicate group's
    invariants (warnings), a page of them. The first 50,000 steps per optimizer (at
    most 2,000,000 steps × tensors) are read; ``truncated`` says when there are more."""
    run, _ = runs.get_run_row(session, run_id, access)
    with collecting() as problems:
        found, read = st.run_structure(session, run)
    page = [
        FindingPublic(
            run=run.id,
            check=str(f["check"]),
            severity=str(f["severity"]),
            step=f.get("step"),
            optimizer=f.get("optimizer"),
            param=f.get("param"),
            message=str(f["message"]),
            hint=str(f.get("hint") or ""),
            details=dict(f.get("details") or {}),
            t=None,
            source="runtime",
        ).model_dump()
        for f in found[offset : offset + limit]
    ]
    return GWJSONResponse(
        {
            "data": page,
            "count": len(found),
            "steps_read": read.steps_read,
            "truncated": read.truncated,
            "problems": problems,
        }
    )


@router.get("/groups/{key}/structure", response_model=GroupStructurePublic, responses=_ERRORS)
def get_group_structure(
    key: Key,
    session: SessionDep,
    access: ReadAccess,
    project: Annotated[str | None, Query(max_length=256)] = None,
) -> GWJSONResponse:
    """The group's invariants (what held on every step of every run that finished with
    no error finding; none with fewer than two) and, for each of its newest 8 runs,
    which invariants it breaks and from which step."""
    project = project_filter(access, project)
    found = groups.describe(session, key, project)
    access.check(found["project"], "read")
    pid = st.project_id(session, found["project"])
    if pid is None:  # the project was just deleted
        raise RequestError(404, f"no group {key[:80]!r}; list groups with GET /api/v1/groups")
    with collecting() as problems:
        reply = st.group_structure(st.group_of(session, key, pid))
    return GWJSONResponse(reply | {"project": found["project"], "problems": problems})
