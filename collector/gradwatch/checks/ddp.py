"""The cross-rank checks of a DDP run: pure comparisons of what every rank published.

Rank 0 calls these on its comparer thread (:mod:`gradwatch.ddp.ranks`) with one summary per
rank; each returns the finding to report, or ``None``. Nothing here talks to the store.

* ``ddp-param-desync``: the bit-exact parameter checksums of a step differ between ranks.
  In DDP every rank applies the same all-reduced gradient to the same parameters, so any
  difference (an update outside the wrapper, a rank that skipped a step, a buffer-less
  in-place edit) is a desync.
* ``ddp-rank-spread``: one window's mean loss, or mean total gradient norm, differs by more
  than ``SPREAD`` × between the largest and smallest rank.
* ``ddp-nonfinite-rank``: the first rank whose loss, gradient or parameter went non-finite.
  The all-reduce spreads a NaN gradient to every rank in the same step, so a rank whose
  *loss* was non-finite at that step is named before ranks that only saw gradients.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from gradwatch.checks.findings import Finding, finding
from gradwatch.checks.fmt import counted
from gradwatch.core import checkids

SPREAD = 10.0
SPREAD_FLOOR = 1e-6  # below this on every rank, a ratio says nothing
KIND_ORDER = {"loss": 0, "grad": 1, "param": 2}
#: fingerprint fields every rank must share (seeds may differ per rank on purpose)
SHARED_FIELDS = (
    ("versions", "torch"),
    ("versions", "python"),
    ("versions", "cuda"),
    ("config_hash",),
    ("determinism", "deterministic_algorithms"),
    ("determinism", "cudnn_deterministic"),
    ("determinism", "cudnn_benchmark"),
)

Summary = Mapping[str, Any]


def _where(s: Summary) -> str:
    return f"rank {s['rank']} ({s['host']})"


def param_desync(step: int, names: Sequence[str], summaries: Sequence[Summary]) -> Finding | None:
    """Compare the checksums of ``step`` (``summaries[i]["sums"]``: one entry per tensor)."""
    ref = summaries[0]
    differ: dict[int, list[str]] = {}
    for s in summaries[1:]:
        bad = [
            names[i] if i < len(names) else str(i)
            for i, (a, b) in enumerate(zip(ref["sums"], s["sums"], strict=False))
            if a != b
        ]
        if bad:
            differ[int(s["rank"])] = bad
    if not differ:
        return None
    first_rank = min(differ)
    tensors = differ[first_rank]
    return finding(
        checkids.DDP_PARAM_DESYNC,
        step,
        f"after step {step} the parameters of {counted(len(differ), 'rank')} differ from rank 0's, "
        f"first {_where(summaries[first_rank])} in {counted(len(tensors), 'tensor')} such as "
        f"{tensors[0]}: the replicas have silently diverged.",
        "every update must go through the DDP-wrapped model and the optimizer on all ranks: "
        "look for parameter edits outside optimizer.step() (.data, no_grad updates) on one rank, "
        "rank-dependent code around step(), or a rank that skipped a step.",
        details={
            "step": step,
            "ranks": sorted(differ),
            "hosts": {str(r): summaries[r]["host"] for r in sorted(differ)},
            "tensors": {str(r): t[:20] for r, t in sorted(differ.items())},
        },
    )


def layouts_differ(summaries: Sequence[Summary]) -> bool:
    """Whether the ranks hold different parameter layouts (sharding, tensor parallel):
    then their checksums are not comparable."""
    return len({json.dumps(s["layout"]) for s in summaries}) > 1


def rank_spread(window: int, summaries: Sequence[Summary]) -> Finding | None:
    """Spread of the per-rank window means of the loss and of the total gradient norm."""
    for metric, label in (("loss", "mean loss"), ("grad_norm", "mean gradient norm")):
        values = {int(s["rank"]): s.get(metric) for s in summaries}
        usable = {r: abs(v) for r, v in values.items() if v is not None and math.isfinite(v)}
        if len(usable) < 2:
            continue
        hi, lo = max(usable, key=usable.__getitem__), min(usable, key=usable.__getitem__)
        if usable[hi] < SPREAD_FLOOR:
            continue
        ratio = usable[hi] / usable[lo] if usable[lo] > 0 else math.inf
        if ratio > SPREAD:
            first, last = summaries[0].get("first_step"), summaries[0].get("last_step")
            return finding(
                checkids.DDP_RANK_SPREAD,
                last,
                f"the {label} of steps {first}-{last} is {ratio:.3g}× larger on "
                f"{_where(summaries[hi])} than on {_where(summaries[lo])}.",
                "check that every rank gets a comparable shard of the data (DistributedSampler, "
                "set_epoch), the same preprocessing and the same loss scaling.",
                details={
                    "metric": metric,
                    "window": window,
                    "ratio": ratio,
                    "per_rank": {str(r): v for r, v in sorted(values.items())},
                },
            )
    return None


def first_nonfinite(upto: int, reports: Sequence[Summary]) -> Finding | None:
    """Name the first rank that went non-finite, among the ``reports`` at steps ≤ ``upto``."""
    seen = [r for r in reports if int(r["step"]) <= upto]
    if not seen:
        return None
    first = min(seen, key=lambda r: (int(r["step"]), KIND_ORDER[r["kind"]], int(r["rank"])))
    same_step = sorted(int(r["rank"]) for r in seen if r["step"] == first["step"])
    what = {"loss": "its loss", "grad": "a gradient", "param": "a parameter"}[first["kind"]]
    tensor = f" ({first['tensor']})" if first.get("tensor") else ""
    spread = (
        f"; {counted(len(same_step) - 1, 'other rank')} followed in the same step"
        if len(same_step) > 1
        else ""
    )
    return finding(
        checkids.DDP_NONFINITE_RANK,
        int(first["step"]),
        f"{_where(first)} was the first to go non-finite: {what}{tensor} at step "
        f"{first['step']}{spread}.",
        f"reproduce on rank {first['rank']}'s data shard at that step (its batch checksum is in "
        "its run), and look for log/sqrt/division of unguarded values or an exploding layer.",
        param=first.get("tensor"),
        details={
            "rank": int(first["rank"]),
            "host": first["host"],
            "kind": first["kind"],
            "ranks": {str(r["rank"]): {"step": r["step"], "kind": r["kind"]} for r in seen},
        },
    )


def fingerprint_subset(fp: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a fast fingerprint that every rank must share."""
    out: dict[str, Any] = {}
    for path in SHARED_FIELDS:
        value: Any = fp
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        out[".".join(path)] = value
    return out


def fingerprint_differences(subsets: Sequence[Summary]) -> dict[str, dict[str, Any]]:
    """``{field: {rank: value}}`` for every shared field on which the ranks disagree."""
    out: dict[str, dict[str, Any]] = {}
    for key in subsets[0]["fields"]:
        values = {str(s["rank"]): s["fields"].get(key) for s in subsets}
        if len({repr(v) for v in values.values()}) > 1:
            out[key] = values
    return out
