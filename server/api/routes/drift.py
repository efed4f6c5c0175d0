"""Drift across repeated runs: compare two runs, replicate groups, baselines, envelopes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query
from sqlalchemy.engine import Engine
from sqlmodel import Session

from gradwatch.server import crud, groups
from gradwatch.server.api.deps import EngineDep, ReadAccess, SessionDep, WriteAccess, project_filter
from gradwatch.server.auth import Access
from gradwatch.server.db import write_session
from gradwatch.server.errors import RequestError
from gradwatch.server.jsonresp import GWJSONResponse
from gradwatch.server.problems import collecting
from gradwatch.server.schemas import ErrorReply

router = APIRouter(tags=["drift"])
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorReply} for code in (401, 403, 404, 422)
}
Tolerance = Annotated[float | None, Query(ge=0.0, le=1e6)]
Key = Annotated[str, Path(max_length=600, description="group key '<config_hash>:<code_hash>'")]


def _torch_parts() -> Any:
    """The comparison code, which computes with torch: imported on first use, so that a
    server installed without torch (the docker image) still starts and serves everything
    else; there these routes answer 503 and say what to install."""
    try:
        import torch

        from gradwatch.drift import envelope
        from gradwatch.drift import verdict as compare
        from gradwatch.server import runload
    except ImportError as exc:
        raise RequestError(
            503,
            f"cross-run comparison needs torch on the server ({exc}); install torch (the CPU "
            "build is enough) beside gradwatch[server]",
        ) from exc
    return torch, compare, envelope, runload


@router.get("/compare", responses=_ERRORS)
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
    _torch, compare, _envelope, runload = _torch_parts()
    runs = [crud.get_run_row(session, run_id, access)[0] for run_id in (a, b)]
    with collecting() as problems:
        data = [runload.load_run_data(session, run) for run in runs]
        try:
            result = compare.compare(data[0], data[1], rtol=rtol, atol=atol)
        except (ValueError, RuntimeError, IndexError, KeyError, TypeError) as e:
            raise RequestError(
                422,
                f"the stored data of runs {a!r} and {b!r} cannot be compared "
                f"({type(e).__name__}: {str(e)[:200]}); {'; '.join(problems) or 'see the logs'}",
            ) from e
    return GWJSONResponse({**result, "problems": problems})


@router.get("/groups", responses=_ERRORS)
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


@router.get("/groups/{key}", responses=_ERRORS)
def get_group(key: Key, session: SessionDep, access: ReadAccess) -> GWJSONResponse:
    """One group: its runs, baseline, reference, seeds and flagged runs."""
    return GWJSONResponse(_group(session, access, key, "read"))


@router.put("/groups/{key}/baseline", responses=_ERRORS)
def pin_baseline(
    key: Key,
    session: SessionDep,
    engine: EngineDep,
    access: WriteAccess,
    run: Annotated[str, Body(embed=True, max_length=128)],
) -> GWJSONResponse:
    """Pin the run that the group's live comparison uses as its reference."""
    found = _group(session, access, key, "write")
    row, project = crud.get_run_row(session, run, access, "write")
    if project != found["project"]:  # an open server's group key may span projects
        raise RequestError(
            422, f"run {run[:130]!r} is not in group {key[:80]!r} of project {found['project']!r}"
        )
    with write_session(engine) as writer:
        groups.pin(writer, key=key, run=row)
    return _fresh(engine, key, found["project"])


@router.delete("/groups/{key}/baseline", responses=_ERRORS)
def unpin_baseline(
    key: Key, session: SessionDep, engine: EngineDep, access: WriteAccess
) -> GWJSONResponse:
    """Forget the pinned baseline: the reference is automatic again."""
    found = _group(session, access, key, "write")
    first, _ = crud.get_run_row(session, found["runs"][0], access, "write")
    with write_session(engine) as writer:
        groups.unpin(writer, project_id=first.project_id, key=key)
    return _fresh(engine, key, found["project"])


def _fresh(engine: Engine, key: str, project: str) -> GWJSONResponse:
    """The group read after a write (the request's session may hold an older snapshot)."""
    with Session(engine) as session:
        return GWJSONResponse(groups.describe(session, key, project))


@router.get("/groups/{key}/envelope", responses=_ERRORS)
def get_envelope(
    key: Key,
    session: SessionDep,
    access: ReadAccess,
    points: Annotated[int, Query(ge=2, le=100_000)] = 1000,
) -> GWJSONResponse:
    """The loss envelope of the group's seed sweep (one run per seed): median ± 4 robust
    standard deviations per step, and which runs leave it."""
    found = _group(session, access, key, "read")
    seeds = groups.seeds(session, found["runs"])
    per_seed: dict[int, str] = {}
    for run_id in found["runs"]:
        seed = seeds.get(run_id)
        if seed is not None:
            per_seed.setdefault(seed, run_id)
    torch, _compare, envelope, runload = _torch_parts()
    losses = {run_id: runload.loss_series(session, run_id) for run_id in per_seed.values()}
    out = envelope.leaving(losses) if losses else {}
    curves: dict[str, list[Any]] = {"steps": [], "median": [], "low": [], "high": []}
    env = envelope.envelope(losses) if losses else None
    if env is not None and env.steps.numel():
        n = int(env.steps.numel())
        pick = torch.unique(torch.linspace(0, n - 1, min(n, points)).round().long())
        curves = {
            "steps": env.steps[pick].tolist(),
            "median": env.median[pick].tolist(),
            "low": (env.median - 4 * env.scale)[pick].tolist(),
            "high": (env.median + 4 * env.scale)[pick].tolist(),
        }
    runs = [
        {
            "id": run_id,
            "seed": seed,
            "outside": out.get(run_id) is not None,
            "first_step": out.get(run_id),
        }
        for seed, run_id in sorted(per_seed.items())
    ]
    return GWJSONResponse({"key": key, **curves, "runs": runs})
