"""Compare two runs: the verdict, the first divergent step, metric and tensor, and the cause.

Pure and local: works on two :class:`RunData` (built from the spool by :func:`from_local`,
or from the server's store), so ``gradwatch compare`` needs no server and the server's
live comparison uses the same code. It computes with numpy only (float64, element-wise
IEEE comparisons: bit-identical runs compare identical), so a server without torch
compares runs too. The cause is decided in the order of ARCHITECTURE.md: environment →
config → code → initial parameters (fingerprint sections, see
:mod:`gradwatch.core.drift.fingerprint_diff`) → the batch differs at the first divergent step
(data order) → the loss differs (forward nondeterminism) → the gradients differ with an
equal loss (backward nondeterminism) → only the update differs (optimizer
nondeterminism).

Example::

    from gradwatch.core.drift.verdict import compare, from_local
    from gradwatch.core.local_reader import load_run
    result = compare(from_local(load_run(dir_a)), from_local(load_run(dir_b)))
    result["verdict"], result["step"], result["param"], result["cause"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gradwatch.core.contract import STAT_NAMES
from gradwatch.core.drift.fingerprint_diff import (
    Tolerance,
    differing_sections,
    fingerprint_diff,
    first_init_difference,
    tolerance_for,
)


class SpooledRun(Protocol):
    """What :func:`from_local` reads of a spooled run
    (``gradwatch.core.local_reader.LocalRun``)."""

    @property
    def id(self) -> str: ...

    @property
    def fingerprint(self) -> dict[str, Any]: ...

    @property
    def steps(self) -> dict[int, list[Any]]: ...

    def tensors_of(self, optimizer: int) -> list[str]:
        """Names of the tensors of one optimizer, in the order of its statistics rows."""
        ...


__all__ = ["VERDICTS", "RunData", "Track", "compare", "from_local"]

VERDICTS = ("identical", "diverged", "not-comparable")
STAT_ORDER = ("grad_norm", "nonfinite_grad", "update_norm", "param_norm")
"""Per-tensor statistics in the order they arise within a step."""
_CAUSE_OF_METRIC = {
    "batch": "data-order",
    "loss": "forward-nondeterminism",
    "grad_norm": "backward-nondeterminism",
    "nonfinite_grad": "backward-nondeterminism",
    "update_norm": "optimizer-nondeterminism",
    "param_norm": "optimizer-nondeterminism",
}


Vector = np.ndarray[Any, Any]
"""A numpy array: int64 steps, float64 values, bool masks."""


@dataclass
class Track:
    """The per-step series of one optimizer: ``stats[name]`` is ``(tensors, steps)``."""

    tensors: list[str]
    steps: Vector  # int64, (steps,)
    loss: Vector  # float64, (steps,): NaN where none was logged
    has_loss: Vector  # bool, (steps,)
    stats: dict[str, Vector]  # float64, (tensors, steps)
    batch: list[str | None]


@dataclass
class RunData:
    """What a comparison reads of one run."""

    id: str
    fingerprint: dict[str, Any]
    tracks: dict[int, Track] = field(default_factory=dict)


def from_local(run: SpooledRun) -> RunData:
    """A spooled run (``gradwatch.core.local_reader.load_run``) as :class:`RunData`."""
    tracks: dict[int, Track] = {}
    for opt, rows in run.steps.items():
        seen: dict[int, int] = {}
        for i, row in enumerate(rows):
            seen.setdefault(row.step, i)
        picked = [rows[i] for _, i in sorted(seen.items())]
        names = run.tensors_of(opt)
        width = len(picked[0].stats) if picked else len(names)
        stats = np.array([list(r.stats) for r in picked], dtype=np.float64).reshape(
            len(picked), width, len(STAT_NAMES)
        )
        tracks[opt] = Track(
            tensors=names[:width] if len(names) >= width else [str(i) for i in range(width)],
            steps=np.array([r.step for r in picked], dtype=np.int64),
            loss=np.array(
                [r.loss if r.loss is not None else float("nan") for r in picked],
                dtype=np.float64,
            ),
            has_loss=np.array([r.loss is not None for r in picked], dtype=np.bool_),
            stats={n: np.ascontiguousarray(stats[:, :, k].T) for k, n in enumerate(STAT_NAMES)},
            batch=[r.batch_hash for r in picked],
        )
    return RunData(run.id, dict(run.fingerprint), tracks)


def _differs(a: Vector, b: Vector, tol: Tolerance) -> Vector:
    """Element-wise: do ``a`` and ``b`` disagree? NaN equals NaN, ±Inf equals itself."""
    both_nan = np.isnan(a) & np.isnan(b)
    same = (a == b) | both_nan
    differs: Vector
    if tol.rtol == 0.0 and tol.atol == 0.0:
        differs = np.logical_not(same)
        return differs
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN: never close
        close = np.abs(a - b) <= tol.atol + tol.rtol * np.maximum(np.abs(a), np.abs(b))
    differs = np.logical_not(same | (finite & close))
    return differs


def _first(mask: Vector) -> int | None:
    """The first index where a one-dimensional mask holds."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


@dataclass
class _Split:
    """Where one optimizer's tracks first split."""

    optimizer: int
    index: int
    step: int
    metric: str
    param: str | None
    difference: dict[str, Any] | None


def _difference(a: Any, b: Any) -> dict[str, Any]:
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return {"a": a, "b": b, "abs": None, "rel": None}
    gap = abs(a - b) if a == a and b == b else float("nan")
    scale = max(abs(a), abs(b))
    return {"a": a, "b": b, "abs": gap, "rel": gap / scale if scale else gap}


def _align(ta: Track, tb: Track) -> tuple[Vector, Vector]:
    where = {int(s): i for i, s in enumerate(tb.steps.tolist())}
    pairs = [(i, where[s]) for i, s in enumerate(ta.steps.tolist()) if s in where]
    ia = np.array([p[0] for p in pairs], dtype=np.int64)
    ib = np.array([p[1] for p in pairs], dtype=np.int64)
    return ia, ib


def _split(
    opt: int, ta: Track, tb: Track, tol: Tolerance, per_tensor: list[dict[str, Any]]
) -> tuple[_Split | None, int]:
    ia, ib = _align(ta, tb)
    n = int(ia.size)
    batch_a = [ta.batch[i] for i in ia.tolist()]
    batch_b = [tb.batch[i] for i in ib.tolist()]
    masks: dict[str, Vector] = {
        "batch": np.array(
            [
                x is not None and y is not None and x != y
                for x, y in zip(batch_a, batch_b, strict=True)
            ],
            dtype=np.bool_,
        ).reshape(n),
        "loss": (ta.has_loss[ia] != tb.has_loss[ib])
        | (ta.has_loss[ia] & _differs(ta.loss[ia], tb.loss[ib], tol)),
    }
    tensor_masks = {
        name: _differs(ta.stats[name][:, ia], tb.stats[name][:, ib], tol) for name in STAT_ORDER
    }
    masks.update({name: np.any(m, axis=0) for name, m in tensor_masks.items()})
    _per_tensor(opt, ta, tb, ia, ib, tensor_masks, per_tensor)
    firsts = {name: _first(m) for name, m in masks.items()}
    hits = [i for i in firsts.values() if i is not None]
    if not hits:
        return None, n
    index = min(hits)
    metric = next(name for name, i in firsts.items() if i == index)
    param, difference = None, None
    for name in STAT_ORDER if metric in ("batch", "loss") else (metric,):
        row = _first(tensor_masks[name][:, index])
        if row is not None:
            param = ta.tensors[row]
            if metric == name:
                difference = _difference(
                    float(ta.stats[name][row, ia[index]]), float(tb.stats[name][row, ib[index]])
                )
            break
    if metric == "loss":
        difference = _difference(float(ta.loss[ia[index]]), float(tb.loss[ib[index]]))
    elif metric == "batch":
        difference = _difference(batch_a[index], batch_b[index])
    step = int(ta.steps[ia[index]])
    return _Split(opt, index, step, metric, param, difference), n


def _per_tensor(
    opt: int,
    ta: Track,
    tb: Track,
    ia: Vector,
    ib: Vector,
    masks: dict[str, Vector],
    out: list[dict[str, Any]],
) -> None:
    """Per-layer evidence: the first step each tensor differs and its largest relative gap."""
    any_mask = np.zeros((len(ta.tensors), int(ia.size)), dtype=np.bool_)
    for m in masks.values():
        any_mask |= m
    rel: dict[str, list[float]] = {}
    for name in ("grad_norm", "update_norm", "param_norm"):
        a, b = ta.stats[name][:, ia], tb.stats[name][:, ib]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            gap = np.abs(a - b) / np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-300)
        gap = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, gap)
        # NaN (a gap involving ±Inf) counts as infinite; an overflowing gap as the largest float
        rel[name] = (
            np.nan_to_num(gap, nan=np.inf).max(axis=1).tolist()
            if gap.size
            else [0.0] * len(ta.tensors)
        )
    for row, tensor in enumerate(ta.tensors):
        first = _first(any_mask[row])
        out.append(
            {
                "name": tensor,
                "optimizer": opt,
                "first_step": None if first is None else int(ta.steps[ia[first]]),
                "max_rel": {name: rel[name][row] for name in rel},
            }
        )


def _not_comparable(ra: RunData, rb: RunData) -> str | None:
    if not ra.tracks or not rb.tracks:
        empty = ra.id if not ra.tracks else rb.id
        return f"run {empty} recorded no optimizer steps"
    for opt in sorted(set(ra.tracks) | set(rb.tracks)):
        if opt not in ra.tracks or opt not in rb.tracks:
            return f"optimizer {opt} exists in only one of the runs"
        if ra.tracks[opt].tensors != rb.tracks[opt].tensors:
            return f"optimizer {opt} holds different parameter tensors in the two runs"
    return None


def compare(
    ra: RunData, rb: RunData, *, rtol: float | None = None, atol: float | None = None
) -> dict[str, Any]:
    """The comparison of ``ra`` with ``rb`` as a JSON-able dict (see ``gradwatch compare``)."""
    fa, fb = ra.fingerprint, rb.fingerprint
    diff = fingerprint_diff(fa, fb)
    sections = differing_sections(diff)
    tol = tolerance_for(fa, fb, rtol=rtol, atol=atol)
    out: dict[str, Any] = {
        "a": ra.id,
        "b": rb.id,
        "verdict": "identical",
        "step": None,
        "metric": None,
        "param": None,
        "optimizer": None,
        "cause": None,
        "difference": None,
        "message": "",
        "exact": tol.rtol == 0.0 and tol.atol == 0.0,
        "tolerance": tol.as_dict(),
        "steps_compared": 0,
        "fingerprint_diff": diff,
        "per_tensor": [],
    }
    reason = _not_comparable(ra, rb)
    if reason is not None:
        cause = sections[0] if sections else None
        return out | {"verdict": "not-comparable", "cause": cause, "message": reason + "."}
    splits: list[_Split] = []
    for opt in sorted(ra.tracks):
        found, n = _split(opt, ra.tracks[opt], rb.tracks[opt], tol, out["per_tensor"])
        out["steps_compared"] += n
        if found is not None:
            splits.append(found)
    if out["steps_compared"] == 0:
        return out | {"verdict": "not-comparable", "message": "the runs share no step."}
    if not splits:
        return out | {"message": _identical_message(out, sections)}
    first = min(splits, key=lambda s: (s.step, s.optimizer))
    cause = sections[0] if sections else _CAUSE_OF_METRIC[first.metric]
    param = first.param
    if cause == "init":
        param = first_init_difference(fa, fb) or param
    out.update(
        verdict="diverged",
        step=first.step,
        metric=first.metric,
        param=param,
        optimizer=first.optimizer,
        cause=cause,
        difference=first.difference,
    )
    out["message"] = _diverged_message(out, diff)
    return out


def _identical_message(out: dict[str, Any], sections: list[str]) -> str:
    how = "bit for bit" if out["exact"] else f"within rtol {out['tolerance']['rtol']:g}"
    note = f" (their fingerprints differ in: {', '.join(sections)})" if sections else ""
    return f"the runs agree {how} over {out['steps_compared']} compared steps{note}."


_WHY = {
    "environment": "the environment differs ({fields})",
    "config": "the config differs ({fields})",
    "code": "the code differs ({fields})",
    "init": "the initial parameters differ (first: {param})",
    "data-order": "the model received a different batch at that step",
    "forward-nondeterminism": "the loss differs although the batch and all earlier steps "
    "agree: the forward pass is nondeterministic",
    "backward-nondeterminism": "the gradient of {param} differs although the loss agrees: "
    "the backward pass is nondeterministic",
    "optimizer-nondeterminism": "the update of {param} differs although its gradient agrees: "
    "the optimizer step is nondeterministic",
}


def divergence(out: dict[str, Any], diff: list[dict[str, Any]]) -> tuple[str, str]:
    """Where a diverged comparison split (``loss, first differing tensor fc.weight`` or
    ``grad_norm of fc.weight``) and why, for the message here and the server's finding."""
    param = out["param"]
    if not param:
        where = out["metric"]
    elif out["metric"] in ("batch", "loss"):  # one value per step, not per tensor
        where = f"{out['metric']}; first differing tensor {param}"
    else:
        where = f"{out['metric']} of {param}"
    fields = ", ".join(d["field"] for d in diff if d["section"] == out["cause"])
    return where, _WHY[out["cause"]].format(fields=fields, param=param)


def _diverged_message(out: dict[str, Any], diff: list[dict[str, Any]]) -> str:
    where, why = divergence(out, diff)
    return f"the runs split at step {out['step']} ({where}): {why}."
