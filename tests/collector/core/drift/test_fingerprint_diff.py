"""The comparison core on hand-built runs: fingerprint sections, tolerances, NaN/±Inf."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from gradwatch.core.drift.envelope import leaving
from gradwatch.core.drift.fingerprint_diff import expects_identical, fingerprint_diff, tolerance_for
from gradwatch.core.drift.verdict import RunData, Track, compare

FP: dict[str, Any] = {
    "seeds": {"torch_initial_seed": 0, "torch_seed_user_set": True},
    "determinism": {"deterministic_algorithms": False},
    "versions": {"torch": "2.13.0"},
    "device": {"types": ["cpu"], "num_threads": 1, "hostname": "a"},
    "config": {"lr": 0.1},
    "config_hash": "c1",
    "code_hash": "k1",
    "init_params_hash": "i1",
    "init_param_checksums": [{"name": "w", "dtype": "torch.float32", "checksum": "00"}],
}


def fp(**changes: Any) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in FP.items()}
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            out[section][key] = value
        else:
            out[section] = value
    return out


def run(name: str, loss: list[float], grad: list[float], fingerprint: dict[str, Any]) -> RunData:
    n = len(loss)
    stats = {s: np.ones((1, n), dtype=np.float64) for s in ("param_norm", "update_norm")}
    stats["grad_norm"] = np.array([grad], dtype=np.float64)
    stats["nonfinite_grad"] = np.zeros((1, n), dtype=np.float64)
    track = Track(
        tensors=["w"],
        steps=np.arange(1, n + 1, dtype=np.int64),
        loss=np.array(loss, dtype=np.float64),
        has_loss=np.ones(n, dtype=np.bool_),
        stats=stats,
        batch=["b"] * n,
    )
    return RunData(name, fingerprint, {0: track})


def test_hostname_and_seed_state_are_evidence_not_causes() -> None:
    diff = fingerprint_diff(FP, fp(device__hostname="b", device__num_threads=2))
    assert {(d["field"], d["section"]) for d in diff} == {
        ("device.hostname", "host"),
        ("device.num_threads", "environment"),
    }
    assert fingerprint_diff(FP, {"versions": {}}) == []  # missing fields are unknown


def test_cpu_replicates_with_a_user_seed_expect_bits_else_a_dtype_tolerance() -> None:
    assert expects_identical(FP, fp()) and tolerance_for(FP, fp()).rtol == 0.0
    assert not expects_identical(FP, fp(seeds={"torch_initial_seed": 0}))
    cuda = fp(device__types=["cuda"])
    assert tolerance_for(cuda, cuda).rtol == pytest.approx(1e-5)  # accelerator: ×10
    unseeded = fp(seeds={"torch_seed_user_set": False})
    half = fp(init_param_checksums=[{"name": "w", "dtype": "torch.bfloat16"}])
    assert tolerance_for(unseeded, half).rtol == pytest.approx(1e-2)  # the least precise
    assert tolerance_for(FP, fp(), rtol=0.5).rtol == 0.5


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_the_same_non_finite_value_in_both_runs_is_no_difference(value: float) -> None:
    a = run("a", [1.0, value, value], [1.0, value, 2.0], FP)
    b = run("b", [1.0, value, value], [1.0, value, 2.0], fp())
    assert compare(a, b)["verdict"] == "identical"
    c = run("c", [1.0, value, 0.5], [1.0, value, 2.0], fp())
    res = compare(a, c)
    assert (res["verdict"], res["step"], res["metric"]) == ("diverged", 3, "loss")
    assert res["cause"] == "forward-nondeterminism"


def test_an_environment_difference_without_a_split_is_identical_within_tolerance() -> None:
    a = run("a", [1.0, 0.9], [2.0, 1.0], FP)
    b = run("b", [1.0, 0.9 * (1 + 1e-9)], [2.0, 1.0], fp(device__num_threads=2))
    res = compare(a, b)
    assert res["verdict"] == "identical" and res["exact"] is False
    assert "environment" in res["message"]
    assert compare(a, b, rtol=0.0)["cause"] == "environment"


def test_different_tensors_are_not_comparable() -> None:
    a = run("a", [1.0], [1.0], FP)
    b = run("b", [1.0], [1.0], fp(code_hash="k2"))
    b.tracks[0].tensors = ["v"]
    res = compare(a, b)
    assert (res["verdict"], res["cause"]) == ("not-comparable", "code")


def test_a_run_whose_loss_turns_nan_leaves_the_envelope() -> None:
    steps = np.arange(1, 41)
    losses = {f"r{i}": (steps, np.linspace(2, 1, 40) + 0.01 * i) for i in range(4)}
    bad = np.linspace(2, 1, 40)
    bad[10:] = math.nan
    losses["bad"] = (steps, bad)
    assert leaving(losses) == {"bad": 11, "r0": None, "r1": None, "r2": None, "r3": None}
