"""The cross-rank checks of a DDP job (implemented in :mod:`gradwatch.checks.ddp`), declared for
the check registry (:mod:`gradwatch.core.registry`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.checks.repro import REPRO_DRIFT
from gradwatch.core.registry import Cause, Check, Family

__all__ = [
    "DDP_NONFINITE_RANK",
    "DDP_PARAM_DESYNC",
    "DDP_RANK_SPREAD",
]

DDP_PARAM_DESYNC: Final = "ddp-param-desync"
DDP_RANK_SPREAD: Final = "ddp-rank-spread"
DDP_NONFINITE_RANK: Final = "ddp-nonfinite-rank"

FAMILY: Final = Family(
    __name__,
    "Distributed",
    (
        Check(DDP_PARAM_DESYNC, "error", "after-update",
           "Parameter checksums differ across the ranks of one DDP job.",
           "any difference at a comparison (every `ddp_every` steps)",
           "ranks that agree bit for bit",
           cause=Cause("desync", 130, also=frozenset({DDP_RANK_SPREAD, REPRO_DRIFT}))),
        Check(DDP_RANK_SPREAD, "warning", "after-update",
           "Per-rank loss or gradient norm differ by a large factor.",
           "spread > {ddp.SPREAD:g}× (values above {ddp.SPREAD_FLOOR:g})",
           "values below {ddp.SPREAD_FLOOR:g} on every rank",
           signs=frozenset({"symptom"})),
        Check(DDP_NONFINITE_RANK, "error", "after-update",
           "The first rank (and host) that produced NaN/Inf.",
           "any non-finite loss, gradient or parameter on a rank",
           "nothing",
           signs=frozenset({"nonfinite", "symptom"})),
    ),
    constants={
        "ddp": "gradwatch.checks.ddp",
    },
)  # fmt: skip
