"""``gradwatch compare`` on real training runs, each trained in its own process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradwatch import cli
from gradwatch.core.drift.envelope import leaving
from gradwatch.core.drift.verdict import compare, from_local
from gradwatch.core.local_reader import load_run
from gradwatch.core.paths import runs_dir
from tests.collector.drift_runs import BUGGY, SWEEP

pytestmark = pytest.mark.slow


@pytest.fixture
def trained(drift_runs: tuple[Path, dict[str, str]]) -> tuple[Path, dict[str, str]]:
    return drift_runs


def result(trained: tuple[Path, dict[str, str]], a: str, b: str, **kw: Any) -> dict[str, Any]:
    root, ids = trained
    runs = [from_local(load_run(runs_dir(root) / ids[name])) for name in (a, b)]
    out: dict[str, Any] = compare(runs[0], runs[1], **kw)
    return out


def verdict(res: dict[str, Any], *more: str) -> tuple[Any, ...]:
    """A comparison's verdict, cause and first differing step, then its fields ``more``."""
    return tuple(res[k] for k in ("verdict", "cause", "step", *more))


def sections(res: dict[str, Any]) -> set[str]:
    return {d["section"] for d in res["fingerprint_diff"]}


def test_identical_seeds_and_deterministic_settings_are_identical_bit_for_bit(
    trained: tuple[Path, dict[str, str]],
) -> None:
    res = result(trained, "base", "same")
    assert res["verdict"] == "identical" and res["exact"] is True
    assert (res["step"], res["cause"], res["param"]) == (None, None, None)
    assert res["steps_compared"] == 30
    assert not sections(res) & {"environment", "config", "code", "init"}


def test_a_different_shuffle_seed_is_data_order_at_the_first_step_whose_batch_differs(
    trained: tuple[Path, dict[str, str]],
) -> None:
    res = result(trained, "base", "shuffle")
    # Epochs are 8 steps and the variant shuffles differently from the third epoch on.
    assert verdict(res, "metric") == ("diverged", "data-order", 17, "batch")
    assert res["difference"]["a"] != res["difference"]["b"]
    assert all(t["first_step"] == 17 for t in res["per_tensor"])


def test_a_different_init_seed_is_init_naming_the_first_tensor(
    trained: tuple[Path, dict[str, str]],
) -> None:
    res = result(trained, "base", "init")
    assert verdict(res, "param") == ("diverged", "init", 1, "0.weight")
    assert "init_params_hash" in {d["field"] for d in res["fingerprint_diff"]}


def test_a_perturbed_gradient_is_backward_nondeterminism_at_that_step_and_tensor(
    trained: tuple[Path, dict[str, str]],
) -> None:
    res = result(trained, "base", "perturb")
    cause = ("diverged", "backward-nondeterminism", 7, "grad_norm", "2.weight")
    assert verdict(res, "metric", "param") == cause
    assert res["exact"] is True and 0 < res["difference"]["abs"] < 1e-2
    first = {t["name"]: t["first_step"] for t in res["per_tensor"]}
    assert first["2.weight"] == 7 and first["0.weight"] == 8  # the split spreads a step later


@pytest.mark.parametrize(
    ("variant", "step", "field"),
    [("threads", 4, "device.num_threads"), ("version", 5, "versions.torch")],
)
def test_a_split_with_a_changed_environment_is_environment(
    trained: tuple[Path, dict[str, str]], variant: str, step: int, field: str
) -> None:
    res = result(trained, "base", variant)
    assert verdict(res) == ("diverged", "environment", step)
    assert field in res["message"]
    assert [d["section"] for d in res["fingerprint_diff"] if d["field"] == field] == ["environment"]


def test_a_changed_hyperparameter_is_config(trained: tuple[Path, dict[str, str]]) -> None:
    res = result(trained, "base", "config")
    assert verdict(res) == ("diverged", "config", 1)
    # The loss and gradients of step 1 come before the learning rate acts.
    assert res["metric"] == "update_norm"
    assert {"field": "config.lr", "section": "config", "a": 0.05, "b": 0.06} in res[
        "fingerprint_diff"
    ]


def test_a_seed_sweep_flags_only_the_run_with_the_silent_bug(
    trained: tuple[Path, dict[str, str]],
) -> None:
    root, ids = trained
    losses = {}
    for name in SWEEP:
        track = from_local(load_run(runs_dir(root) / ids[name])).tracks[0]
        losses[name] = (track.steps, track.loss)
    flagged = leaving(losses)
    assert [name for name, step in flagged.items() if step is not None] == [BUGGY]


def test_cli_json_has_the_documented_keys_and_exit_status(
    trained: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    root, ids = trained
    code = cli.main(["compare", ids["base"], ids["perturb"], "--json", "--data-dir", str(root)])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert {"verdict", "step", "metric", "param", "cause", "difference"} <= set(out)
    assert (out["verdict"], out["step"], out["param"]) == ("diverged", 7, "2.weight")
    assert cli.main(["compare", ids["base"], ids["same"], "--data-dir", str(root)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("identical:") and "bit for bit" in text
    assert cli.main(["compare", ids["base"], "nope", "--data-dir", str(root)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
