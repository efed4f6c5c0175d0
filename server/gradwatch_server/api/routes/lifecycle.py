"""``GET /runs/{id}/lifecycle``: backward / zero_grad / step events per step, a window."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gradwatch_server.api.deps import ReadAccess, SessionDep
from gradwatch_server.jsonresp import GWJSONResponse
from gradwatch_server.problems import collecting
from gradwatch_server.read import runs
from gradwatch_server.read.step_events import lifecycle, window
from gradwatch_server.schemas import LifecyclePublic, error_replies

router = APIRouter(prefix="/runs", tags=["runs"])
_ERRORS = error_replies(401, 403, 404)
Step = Annotated[int | None, Query(ge=0, le=1 << 62)]


@router.get("/{run_id}/lifecycle", response_model=LifecyclePublic, responses=_ERRORS)
def get_lifecycle(
    run_id: str,
    session: SessionDep,
    access: ReadAccess,
    optimizer: Annotated[int, Query(ge=0, le=1 << 20)] = 0,
    start: Step = None,
    end: Step = None,
    limit: Annotated[int, Query(ge=1, le=2000)] = 200,
) -> GWJSONResponse:
    """The lifecycle of at most ``limit`` steps: the last ones, or from ``start`` / to ``end``."""
    run, _ = runs.get_run_row(session, run_id, access)
    first, last = window(run.steps, start, end, limit)
    with collecting() as problems:
        data = lifecycle(session, run_id, optimizer, first, last)
    reply = {"data": data, "count": len(data), "start": first, "end": last, "problems": problems}
    return GWJSONResponse(reply)
