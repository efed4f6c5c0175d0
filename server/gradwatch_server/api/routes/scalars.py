"""``GET /runs/{id}/scalars``: the keys a run logged with ``run.log``.

``/series?scalar=KEY`` reads one of them; this lists them, so that a client (the pandas
reader, ``gradwatch.open_run``) can read every user scalar without knowing the keys.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel
from sqlmodel import col, select

from gradwatch.core.records import SCALARS_OPTIMIZER
from gradwatch_server.api.deps import ReadAccess, SessionDep
from gradwatch_server.jsonresp import GWJSONResponse
from gradwatch_server.jsontext import load_json
from gradwatch_server.models import SeriesChunk
from gradwatch_server.read import runs
from gradwatch_server.schemas import error_replies

router = APIRouter(prefix="/runs", tags=["runs"])
_ERRORS = error_replies(401, 404)


class ScalarKeys(BaseModel):
    """User scalar keys, in the order they were first logged."""

    data: list[str]
    count: int


@router.get("/{run_id}/scalars", response_model=ScalarKeys, responses=_ERRORS)
def get_scalar_keys(run_id: str, session: SessionDep, access: ReadAccess) -> GWJSONResponse:
    """The keys the run logged with ``run.log``, first-logged first."""
    runs.get_run_row(session, run_id, access)
    query = (
        select(SeriesChunk.meta)
        .where(col(SeriesChunk.run_id) == run_id, col(SeriesChunk.optimizer) == SCALARS_OPTIMIZER)
        .order_by(col(SeriesChunk.seq))
    )
    keys: dict[str, None] = {}
    for meta in session.execute(query).scalars():
        found = (load_json(meta) or {}).get("keys") or []
        keys.update(dict.fromkeys(str(k) for k in found))
    return GWJSONResponse({"data": list(keys), "count": len(keys)})
