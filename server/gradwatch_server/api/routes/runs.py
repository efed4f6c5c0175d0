"""Runs: list, detail (with fingerprint), findings and series."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from gradwatch_server.api.deps import PolicyDep, ReadAccess, SessionDep
from gradwatch_server.auth import Access
from gradwatch_server.jsonresp import GWJSONResponse
from gradwatch_server.jsontext import load_json
from gradwatch_server.models import Run
from gradwatch_server.problems import collecting
from gradwatch_server.read import runs
from gradwatch_server.read.overview import heatmaps, typed
from gradwatch_server.read.series import (
    Selection,
    check_budget,
    jsonable,
    metric,
    select_series,
    tensor_rows,
)
from gradwatch_server.read.status import STATUSES
from gradwatch_server.schemas import (
    FindingsPublic,
    IncidentsPublic,
    OverviewPublic,
    RunDetail,
    RunsPublic,
    SeriesPublic,
    error_replies,
)

router = APIRouter(prefix="/runs", tags=["runs"])
_ERRORS = error_replies(401, 403, 404, 422)
Offset = Annotated[int, Query(ge=0, le=1 << 31)]
Names = Annotated[list[str], Query(max_length=100_000)]


def _readable(session: SessionDep, access: Access, run_id: str) -> tuple[Run, str]:
    return runs.get_run_row(session, run_id, access)


@router.get("", response_model=RunsPublic, responses=_ERRORS)
def list_runs(
    session: SessionDep,
    access: ReadAccess,
    policy: PolicyDep,
    project: Annotated[str | None, Query(max_length=256)] = None,
    status: Annotated[str | None, Query(description=f"one of {list(STATUSES)}")] = None,
    tag: Annotated[str | None, Query(max_length=256)] = None,
    config_hash: Annotated[str | None, Query(max_length=256)] = None,
    group: Annotated[str | None, Query(max_length=600, description="replicate group key")] = None,
    ddp_group: Annotated[
        str | None, Query(max_length=128, description="DDP: every rank's stream of this run")
    ] = None,
    job: Annotated[
        str | None, Query(max_length=128, description="every run of one launch (its `job`)")
    ] = None,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> GWJSONResponse:
    """Runs newest first; with a read token, only that token's project."""
    if access.project is not None:
        access.check(project or access.project, "read")
        project = access.project
    data, count = runs.list_runs(
        session,
        policy=policy,
        project=project,
        status=status,
        tag=tag,
        config_hash=config_hash,
        group=group,
        ddp_group=ddp_group,
        job=job,
        offset=offset,
        limit=limit,
    )
    return GWJSONResponse({"data": [r.model_dump() for r in data], "count": count})


@router.get("/{run_id}", response_model=RunDetail, responses=_ERRORS)
def get_run(
    run_id: str, session: SessionDep, access: ReadAccess, policy: PolicyDep
) -> GWJSONResponse:
    """One run with its start record, merged fingerprint and end record."""
    run, project = _readable(session, access, run_id)
    return GWJSONResponse(
        runs.get_run(session, run=run, project=project, policy=policy).model_dump()
    )


@router.get("/{run_id}/findings", response_model=FindingsPublic, responses=_ERRORS)
def get_findings(
    run_id: str,
    session: SessionDep,
    access: ReadAccess,
    severity: Annotated[str | None, Query(max_length=16)] = None,
    check: Annotated[str | None, Query(max_length=256)] = None,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> GWJSONResponse:
    """A run's findings by step (filter by severity or check id)."""
    _readable(session, access, run_id)
    data, count = runs.findings(
        session, run_id=run_id, severity=severity, check=check, offset=offset, limit=limit
    )
    return GWJSONResponse({"data": [f.model_dump() for f in data], "count": count})


@router.get("/{run_id}/incidents", response_model=IncidentsPublic, responses=_ERRORS)
def get_incidents(run_id: str, session: SessionDep, access: ReadAccess) -> GWJSONResponse:
    """A run's findings grouped by root cause: one sentence per incident, then its findings."""
    _readable(session, access, run_id)
    data = runs.incidents(session, run_id)
    return GWJSONResponse({"data": data, "count": len(data)})


@router.get("/{run_id}/series", response_model=SeriesPublic, responses=_ERRORS)
def get_series(
    run_id: str,
    session: SessionDep,
    access: ReadAccess,
    tensor: Names = [],  # noqa: B006  (FastAPI copies query defaults)
    stat: Names = ["grad_norm"],  # noqa: B006
    metric: Names = [],  # noqa: B006
    scalar: Names = [],  # noqa: B006
    optimizer: Annotated[int, Query(ge=0, le=1 << 20)] = 0,
    start: Annotated[int | None, Query(ge=-(1 << 62), le=1 << 62)] = None,
    end: Annotated[int | None, Query(ge=-(1 << 62), le=1 << 62)] = None,
    points: Annotated[int, Query(ge=2, le=1_000_000)] = 1000,
) -> GWJSONResponse:
    """Series of selected tensors × stats, metrics (loss, lr, ...) and user scalars.

    Each is downsampled to about ``points`` points, keeping every bucket's min and max and
    every non-finite point. Values may be ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``.
    """
    run, _ = _readable(session, access, run_id)
    sel = Selection(tensor, stat, metric, scalar, optimizer, start, end, points)
    with collecting() as problems:
        data = select_series(session, run_id, load_json(run.start_meta) or {}, sel, steps=run.steps)
    return GWJSONResponse({"data": data, "count": len(data), "problems": problems})


@router.get("/{run_id}/overview", response_model=OverviewPublic, responses=_ERRORS)
def get_overview(
    run_id: str,
    session: SessionDep,
    access: ReadAccess,
    policy: PolicyDep,
    stat: Annotated[str, Query(max_length=64)] = "grad_norm",
    also: Annotated[list[str], Query(max_length=16)] = [],  # noqa: B006
    optimizer: Annotated[int, Query(ge=0, le=1 << 20)] = 0,
    points: Annotated[int, Query(ge=2, le=5000)] = 200,
    loss: bool = True,
    encoding: Literal["json", "base64"] = "json",
) -> GWJSONResponse:
    """The run, its loss and a tensors × steps heatmap of ``stat`` (at most ``points`` columns).

    Read from the coarse level of the store, so it stays fast on runs of 100k+ steps.
    ``also``: more statistics in the same columns (the reply's ``also``); ``loss=false``
    leaves the loss out; ``encoding=base64`` sends every matrix as a typed array (bytes of
    float32/float64 in base64, NaN and ±Inf exact) instead of lists of JSON numbers.
    """
    run, project = _readable(session, access, run_id)
    stats = list(dict.fromkeys([stat, *also]))
    with collecting() as problems:
        start_meta = load_json(run.start_meta) or {}
        rows = sorted((r, n) for n, (o, r) in tensor_rows(start_meta).items() if o == optimizer)
        check_budget(max(len(rows), 1) * len(stats), points)
        steps, grids = heatmaps(session, run_id, optimizer, stats, points)
        sel = Selection([], [], [], [], optimizer, None, None, points)
        losses = metric(session, run_id, "loss", sel) if loss else []

    def out(values: Any) -> Any:
        return typed(values) if encoding == "base64" else jsonable(values)

    return GWJSONResponse(
        {
            "run": runs.public_run(session, run=run, project=project, policy=policy).model_dump(),
            "stat": stat,
            "tensors": [name for _, name in rows][: len(grids[stat])],
            "steps": steps.tolist(),
            "values": out(grids[stat]),
            "also": {s: out(grids[s]) for s in stats[1:]},
            "loss": losses[0] if losses else None,
            "problems": problems,
        }
    )
