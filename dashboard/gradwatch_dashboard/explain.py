"""What went wrong in a run, in words, from its findings (and where the data says so).

Example::

    >>> explain([{"check": "stale-grad", "severity": "error", "step": 2, "param": None,
    ...           "message": "gradients are not being cleared."}], None)
    ['stale-grad at step 2: gradients are not being cleared.']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from gradwatch.core import checkids
from gradwatch.core.incidents import views
from gradwatch_dashboard.values import grid

NONFINITE_CHECKS = (checkids.NONFINITE_GRAD, checkids.NONFINITE_LOSS, checkids.NONFINITE_PARAM)
LIFECYCLE_CHECKS = (
    checkids.STALE_GRAD,
    checkids.GRAD_ZEROED_BEFORE_STEP,
    checkids.STEP_WITHOUT_BACKWARD,
)
RANK = {"error": 0, "warning": 1, "info": 2}
MAX_LINES = 6


def first_nonfinite(
    findings: Sequence[dict[str, Any]],
    nonfinite: dict[str, Any] | None,
    loss: tuple[Sequence[int], Sequence[float]] | None,
) -> tuple[int, str | None] | None:
    """The first step (and tensor) with NaN/Inf: from the findings, else from the data.

    The collector's ``nonfinite-*`` findings name the first tensor in forward order; without
    them (a check turned off) the overview's first column holding a count, or the first
    non-finite loss, is the answer (the tensor then is the first in the overview's order).
    """
    hits = [f for f in findings if f["check"] in NONFINITE_CHECKS and f.get("step") is not None]
    if hits:
        # earliest first; at one step the gradient finding names the first tensor in forward order
        best = min(hits, key=lambda f: (int(f["step"]), f["check"] != checkids.NONFINITE_GRAD))
        return int(best["step"]), best.get("param")
    candidates: list[tuple[int, str | None]] = []
    if nonfinite and nonfinite.get("steps"):
        steps = nonfinite["steps"]
        cells = grid(nonfinite["values"])[: len(nonfinite["tensors"]), : len(steps)] != 0.0
        columns = np.flatnonzero(cells.any(axis=0))  # NaN != 0 counts
        if len(columns):
            j = int(columns[0])
            candidates.append((int(steps[j]), nonfinite["tensors"][int(np.argmax(cells[:, j]))]))
    if loss:
        step = next((s for s, v in zip(*loss, strict=True) if not math.isfinite(v)), None)
        if step is not None:
            candidates.append((int(step), None))
    return min(candidates, key=lambda c: c[0]) if candidates else None


def lifecycle_anomalies(findings: Sequence[dict[str, Any]]) -> dict[int, list[str]]:
    """Steps with a lifecycle finding → the check ids found there."""
    out: dict[int, list[str]] = {}
    for f in findings:
        if f["check"] in LIFECYCLE_CHECKS and f.get("step") is not None:
            out.setdefault(int(f["step"]), []).append(f["check"])
    return out


def explain(findings: Sequence[dict[str, Any]], first: tuple[int, str | None] | None) -> list[str]:
    """One sentence per incident (:mod:`gradwatch.core.incidents`) — its root cause, then what
    followed — the worst ones when there are many, and the first NaN/Inf, all in the order
    they happened; a reassuring line when there is none."""
    told: list[tuple[int | None, str]] = []
    if first is not None:
        step, tensor = first
        where = f" in {tensor}" if tensor else " (in the loss)"
        told.append((step, f"First NaN/Inf at step {step}{where}."))
    # the worst incidents when there are many
    ranked = sorted(
        views(findings), key=lambda v: (RANK.get(v.severity, 3), v.cause.get("step") or 0)
    )[: max(0, MAX_LINES - len(told))]
    told += [(v.cause.get("step"), v.sentence()) for v in ranked]
    # in step order; at one step the NaN line (listed first) stays before the incidents
    told.sort(key=lambda t: (t[0] is None, t[0] or 0))
    lines = [text for _, text in told]
    if not lines:
        lines.append("No problems found: every integrity check stayed quiet.")
    return lines
