"""The cross-rank comparisons themselves, on hand-made summaries (the 2-process tests are in
``tests/collector/ddp/test_ranks.py``)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gradwatch.checks import ddp


def summary(rank: int, **values: Any) -> dict[str, Any]:
    return {"rank": rank, "host": f"node{rank}", **values}


def test_equal_checksums_are_no_desync() -> None:
    sums = ["a" * 32, "b" * 32]
    assert ddp.param_desync(5, ["w", "b"], [summary(r, sums=sums) for r in range(4)]) is None


def test_desync_names_the_ranks_and_tensors_that_differ() -> None:
    same, other = ["a" * 32, "b" * 32], ["a" * 32, "c" * 32]
    found = ddp.param_desync(
        10, ["w", "b"], [summary(0, sums=same), summary(1, sums=same), summary(2, sums=other)]
    )
    assert found is not None
    assert (found.check, found.severity, found.step) == ("ddp-param-desync", "error", 10)
    assert found.details["ranks"] == [2] and found.details["tensors"] == {"2": ["b"]}
    assert "rank 2 (node2)" in found.message


@pytest.mark.parametrize(
    ("losses", "spread"),
    [
        ([1.0, 1.5, 0.8], False),
        ([1.0, 10.0], False),  # exactly 10x is not more than 10x
        ([1.0, 10.5], True),
        ([-2.0, 30.0], True),  # magnitudes are compared
        ([1e-9, 1e-7], False),  # both below the floor: a converged model, not a spread
        ([0.0, 1.0], True),
        ([float("nan"), 1.0, 100.0], True),  # non-finite values are left out
        ([float("inf"), 1.0], False),
        ([None, 5.0], False),
    ],
)
def test_rank_spread(losses: list[float | None], spread: bool) -> None:
    summaries = [
        summary(r, loss=v, grad_norm=1.0, first_step=1, last_step=5) for r, v in enumerate(losses)
    ]
    found = ddp.rank_spread(0, summaries)
    assert (found is not None) == spread
    if found is not None:
        assert found.check == "ddp-rank-spread" and found.step == 5
        assert found.details["metric"] == "loss"


def test_gradient_norm_spread() -> None:
    summaries = [summary(r, loss=1.0, grad_norm=g, last_step=50) for r, g in enumerate([1, 50])]
    found = ddp.rank_spread(9, summaries)
    assert found is not None and found.details["metric"] == "grad_norm"
    assert math.isclose(found.details["ratio"], 50.0)


def test_first_nonfinite_prefers_the_earliest_step_then_the_loss() -> None:
    reports = [
        summary(0, step=8, kind="grad", tensor="w"),
        summary(1, step=8, kind="loss", tensor=None),
        summary(2, step=8, kind="grad", tensor="w"),
        summary(3, step=12, kind="loss", tensor=None),
    ]
    found = ddp.first_nonfinite(20, reports)
    assert found is not None
    assert (found.step, found.details["rank"], found.details["host"]) == (8, 1, "node1")
    assert "2 other ranks followed" in found.message
    earlier = ddp.first_nonfinite(20, [*reports, summary(3, step=7, kind="param", tensor="b")])
    assert earlier is not None and earlier.details["rank"] == 3 and earlier.param == "b"
    assert ddp.first_nonfinite(5, reports) is None  # none at or before step 5 yet


def test_fingerprint_differences_and_layouts() -> None:
    fp = {"versions": {"torch": "2.13.0", "python": "3.11"}, "config_hash": "abc"}
    other = {"versions": {"torch": "2.12.0", "python": "3.11"}, "config_hash": "abc"}
    subsets = [
        {"rank": 0, "fields": ddp.fingerprint_subset(fp)},
        {"rank": 1, "fields": ddp.fingerprint_subset(other)},
    ]
    assert ddp.fingerprint_differences(subsets) == {
        "versions.torch": {"0": "2.13.0", "1": "2.12.0"}
    }
    same = [{"layout": [["w", [2, 3], "torch.float32"]]}] * 2
    sharded = [same[0], {"layout": [["w", [1, 3], "torch.float32"]]}]
    assert not ddp.layouts_differ(same) and ddp.layouts_differ(sharded)
