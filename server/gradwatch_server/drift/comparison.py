"""Cross-run comparison and seed envelopes of stored runs, for the API (numpy; no torch).

``compare_runs`` is what ``GET /compare`` answers: :func:`gradwatch.core.drift.verdict.compare`
on two stored runs, plus the ``problems`` met reading them. ``group_envelope`` is ``GET
/groups/{key}/envelope``: the loss envelope of one run per seed
(:mod:`gradwatch.core.drift.envelope`), drawn at no more than ``points`` evenly spread steps
(:func:`spread`), and which runs leave it.

Example::

    reply = compare_runs(session, run_a, run_b, rtol=None, atol=None)
    reply["verdict"], reply["step"], reply["problems"]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlmodel import Session

from gradwatch.core.drift.envelope import envelope, leaving
from gradwatch.core.drift.verdict import compare
from gradwatch.core.nonfinite import to_jsonable
from gradwatch_server.exceptions import RequestError
from gradwatch_server.models import Run
from gradwatch_server.problems import collecting
from gradwatch_server.read import groups
from gradwatch_server.read.runload import load_run_data, loss_series

BAND = 4.0
"""The envelope drawn is median ± ``BAND`` robust standard deviations (the flagging z)."""


def compare_runs(
    session: Session, a: Run, b: Run, *, rtol: float | None, atol: float | None
) -> dict[str, Any]:
    """The comparison of two stored runs with the ``problems`` of reading them, non-finite
    floats tagged (``{"$f": "inf"}``, :func:`gradwatch.core.nonfinite.to_jsonable`); 422 when their
    stored data cannot be compared."""
    with collecting() as problems:
        data = [load_run_data(session, run) for run in (a, b)]
        try:
            result = compare(data[0], data[1], rtol=rtol, atol=atol)
        except (ValueError, RuntimeError, IndexError, KeyError, TypeError) as e:
            raise RequestError(
                422,
                f"the stored data of runs {a.id!r} and {b.id!r} cannot be compared "
                f"({type(e).__name__}: {str(e)[:200]}); {'; '.join(problems) or 'see the logs'}",
            ) from e
    # free-form values (a batch hash or a NaN loss in ``difference``, ``per_tensor``'s
    # ratios) in the wire's tagged form, as ``gradwatch compare --json`` prints them
    return {**to_jsonable(result), "problems": problems}


def spread(n: int, points: int) -> np.ndarray[Any, Any]:
    """Indices of at most ``points`` of ``n`` items, evenly spread, first and last included
    (each the nearest index to its ideal position, ties to even)."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.rint(np.linspace(0, n - 1, min(n, points))).astype(np.int64))


def one_per_seed(session: Session, run_ids: list[str]) -> dict[int, str]:
    """Seed -> the first of ``run_ids`` with that seed (runs without a known seed are left out)."""
    seeds = groups.seeds(session, run_ids)
    per_seed: dict[int, str] = {}
    for run_id in run_ids:
        seed = seeds.get(run_id)
        if seed is not None:
            per_seed.setdefault(seed, run_id)
    return per_seed


def group_envelope(session: Session, key: str, run_ids: list[str], points: int) -> dict[str, Any]:
    """The envelope of the group's seed sweep and its runs (see the module docstring)."""
    per_seed = one_per_seed(session, run_ids)
    losses = {run_id: loss_series(session, run_id) for run_id in per_seed.values()}
    out = leaving(losses) if losses else {}
    curves: dict[str, list[Any]] = {"steps": [], "median": [], "low": [], "high": []}
    env = envelope(losses) if losses else None
    if env is not None and env.steps.size:
        pick = spread(int(env.steps.size), points)
        curves = {
            "steps": env.steps[pick].tolist(),
            "median": env.median[pick].tolist(),
            "low": (env.median - BAND * env.scale)[pick].tolist(),
            "high": (env.median + BAND * env.scale)[pick].tolist(),
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
    return {"key": key, **curves, "runs": runs}
