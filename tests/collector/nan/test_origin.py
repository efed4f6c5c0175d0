"""NaN provenance: real training scripts (``scripts/nan_train.py``) that go non-finite, each
localised to the module and operation that made the first non-finite value."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import gradwatch
from gradwatch.checks.findings import Finding
from gradwatch.nan.origin import NO_FORWARD
from gradwatch.session.handle import Run
from tests.collector.scripts import nan_train

BAD = 5


def first(run: Run, check: str) -> Finding:
    found = [f for f in run.findings if f.check == check]
    assert found, [(f.check, f.step) for f in run.findings]
    return found[0]


def trained(case: str, policy: str = "warn", steps: int = 7) -> Run:
    checks = {"all": "record", "nonfinite-loss": policy, "nonfinite-grad": policy}
    try:
        return nan_train.train(case, steps, BAD, checks=checks)  # type: ignore[no-any-return]
    except gradwatch.IntegrityError as exc:
        return exc.run  # type: ignore[attr-defined,no-any-return]


def origin_of(run: Run, check: str = "nonfinite-loss") -> dict[str, Any]:
    f = first(run, check)
    assert f.step == BAD
    origin: dict[str, Any] = f.details["origin"]
    assert origin["found"] and origin["step"] == BAD, origin
    assert origin["summary"] in f.message  # hence in the stderr line
    return origin


CASES = {
    # case: (phase, module, module type, op, autograd node, cause)
    "log-softmax": ("forward", "out", "LogProbs", "log", "LogBackward0", "log of 0"),
    "exp-overflow": ("forward", "mid", "PositiveScale", "exp", "ExpBackward0", "exp overflow"),
    "batch-stat": ("forward", "norm", "BatchStandardize", "div", "DivBackward0", "division by 0"),
    "nan-input": ("input", "body.0", "Linear", "linear", "AddmmBackward0", "input batch"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_cause_is_localised_to_its_module_and_operation(case: str) -> None:
    phase, module, kind, op, node, cause = CASES[case]
    run = trained(case)
    origin = origin_of(run)
    assert (origin["phase"], origin["module"], origin["module_type"]) == (phase, module, kind)
    assert (origin["op"], origin["autograd_node"]) == (op, node)
    assert origin["cause"].startswith(cause) or cause in origin["cause"], origin["cause"]
    assert origin["source"].startswith(nan_train.__file__)  # the line of the user's code
    # the gradients and the parameters it poisoned point back to the same origin
    assert origin_of(run, "nonfinite-grad")["summary"] == origin["summary"]
    assert first(run, "nonfinite-param").details["origin"]["summary"] == origin["summary"]


def test_value_ranges_show_what_led_there() -> None:
    log = origin_of(trained("log-softmax"))
    assert log["inputs"][0]["min"] == 0.0 and log["inputs"][0]["shape"] == [nan_train.N, 4]
    assert log["output"]["neginf"] > 0
    div = origin_of(trained("batch-stat"))
    assert div["inputs"][1]["max"] == 0.0  # the divisor: a batch standard deviation of 0
    nan = origin_of(trained("nan-input"))
    assert nan["batch"]["argument"] == "args[0]" and nan["batch"]["nan"] == 1


def test_huge_learning_rate_is_the_update_that_overflowed() -> None:
    run = trained("huge-lr")
    f = first(run, "nonfinite-param")
    origin = f.details["origin"]
    assert f.step == BAD and origin["phase"] == "update" and origin["op"] == "SGD.step"
    assert origin["tensor"] == f.param and origin["module"] == f.param.rpartition(".")[0]
    assert origin["lr"] == 1e38 and origin["cause"].startswith("the optimizer update")
    # the next forward overflows on the huge weights, first in the first layer that uses them
    later = first(run, "nonfinite-loss")
    assert later.step == BAD + 1 and later.details["origin"]["phase"] in ("forward", "parameter")


def test_backward_only_cause_is_found_in_the_backward_replay() -> None:
    origin = origin_of(trained("sqrt-zero"), "nonfinite-grad")
    assert (origin["phase"], origin["module"], origin["autograd_node"]) == (
        "backward",
        "features.1",
        "SqrtBackward0",
    )
    assert "derivative of sqrt at 0" in origin["cause"]


def test_cause_in_the_loss_outside_the_model_is_named_from_the_loss_graph() -> None:
    origin = origin_of(trained("loss-log"))
    assert origin["phase"] == "loss" and origin["module"] is None
    assert origin["autograd_node"] == "LogBackward0"
    assert origin["loss_ops"][-1] == "NllLossBackward0"


@pytest.mark.parametrize("policy", ["raise", "skip", "checkpoint"])
def test_real_time_policies_localise_before_acting(policy: str) -> None:
    run = trained("log-softmax", policy)
    origin = origin_of(run)
    assert (origin["module"], origin["autograd_node"]) == ("out", "LogBackward0")
    if policy == "skip":  # training went on, finite, after the skipped update
        assert not [f for f in run.findings if f.check == "nonfinite-param"]


def test_a_streak_is_localised_once_at_its_first_step() -> None:
    run = trained("log-softmax", "skip", steps=7)
    assert run.context.nan_origin.replays == 1
    clean = trained("log-softmax", "warn", steps=BAD - 1)
    assert clean._nan_origin.replays == 0 and not clean.findings


def test_replay_leaves_training_untouched() -> None:
    """Dropout and BatchNorm: the replay restores the RNG and the buffers, so a run whose
    bad update is skipped equals a plain loop that drops that update by hand."""

    def run_once(watched: bool) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(6, 16),
            torch.nn.BatchNorm1d(16),
            torch.nn.Dropout(0.3),
            torch.nn.Linear(16, 4),
        )
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        run = gradwatch.watch(model, opt, checks={"nonfinite-grad": "skip"}) if watched else None
        for step in range(1, 8):
            x, y = nan_train.batch("nan-input", step, BAD)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if not watched and step == BAD:
                opt.zero_grad(set_to_none=True)  # what the skip policy does
            opt.step()
        if run is not None:
            assert run.context.nan_origin.replays == 1
            run.close()
        return {**model.state_dict(), "rng": torch.get_rng_state()}

    with_gw, plain = run_once(True), run_once(False)
    # BatchNorm counted no extra forward; the replay's dropout draws were undone
    assert int(with_gw["1.num_batches_tracked"]) == int(plain["1.num_batches_tracked"]) == 7
    assert with_gw.keys() == plain.keys()
    for key, a in with_gw.items():
        b = plain[key]
        assert torch.equal(a, b) or bool(((a == b) | (a.isnan() & b.isnan())).all()), key


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADWATCH_NAN_ORIGIN", "0")
    f = first(trained("log-softmax"), "nonfinite-loss")
    assert "origin" not in f.details
    monkeypatch.setenv("GRADWATCH_NAN_ORIGIN", "maybe")
    with pytest.raises(gradwatch.ConfigError, match="GRADWATCH_NAN_ORIGIN"):
        trained("log-softmax")


def test_a_model_whose_own_forward_never_runs_is_localised_from_its_second_step() -> None:
    """Training calls ``model.net`` (as a LightningModule's training_step does): at step 1
    the modules that run are not known yet, and the finding says so; from step 2 on the
    capture sits on ``net`` and a NaN batch is traced to it (tests/collector/hooks/
    test_outermost.py covers the rest)."""

    class Wrapper(torch.nn.Module):  # like a LightningModule: training calls self.net
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())

    def trained_with_nan_at(bad: int) -> Finding:
        torch.manual_seed(0)
        model = Wrapper()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        checks = {"all": "record", "nonfinite-loss": "warn", "nonfinite-grad": "warn"}
        run = gradwatch.watch(model, opt, checks=checks)
        for step in range(1, bad + 2):
            x = torch.randn(16, 4)
            if step == bad:
                x[0, 0] = float("nan")
            opt.zero_grad()
            model.net(x).pow(2).mean().backward()
            opt.step()
        run.close()
        f = first(run, "nonfinite-loss")
        assert f.step == bad
        return f

    f = trained_with_nan_at(1)
    origin = f.details["origin"]
    assert (origin["found"], origin["step"], origin["reason"]) == (False, 1, NO_FORWARD)
    assert f.message == f"the loss is nan. Origin not localised: {NO_FORWARD}."
    origin = trained_with_nan_at(2).details["origin"]
    assert (origin["phase"], origin["module"], origin["batch"]["argument"]) == (
        "input",
        "net.0",
        "args[0]",
    )
