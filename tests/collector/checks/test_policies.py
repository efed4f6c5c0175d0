"""Policies ``off | record | warn | raise | skip`` on real bugs, set by ``watch(checks=...)``
and by ``$GRADWATCH_CHECKS``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from tests.collector.checks.common import (
    batch,
    mlp,
    mse,
    of,
    same,
    snapshot,
    standard,
    train,
)

NAN = float("nan")


def adam(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=1e-2)


class Recorder:
    """A loop body that keeps the parameters (and Adam state) from just before each
    ``step()`` and just after it."""

    def __init__(self, bug: str | None = None, at: int = 5) -> None:
        self.bug, self.at = bug, at
        self.before: dict[int, list[torch.Tensor]] = {}
        self.after: dict[int, list[torch.Tensor]] = {}
        self.state_before: dict[int, list[Any]] = {}
        self.state_after: dict[int, list[Any]] = {}

    @staticmethod
    def state(opt: Any) -> list[Any]:
        return [
            {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
            for s in opt.state.values()
        ]

    def __call__(
        self, i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor
    ) -> None:
        if self.bug != "no zero_grad":
            opt.zero_grad()
        mse(model(x), y).backward()
        if self.bug == "nan grad" and i == self.at:
            model[2].weight.grad[0, 0] = NAN
        self.before[i], self.state_before[i] = snapshot(model), self.state(opt)
        opt.step()
        self.after[i], self.state_after[i] = snapshot(model), self.state(opt)


def same_state(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys()
        and all(same([x[k]], [y[k]]) if isinstance(x[k], torch.Tensor) else x[k] == y[k] for k in x)
        for x, y in zip(a, b, strict=True)
    )


# -- raise -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("check", "bug", "at_step"),
    [("stale-grad", "no zero_grad", 2), ("nonfinite-grad", "nan grad", 6)],
)
def test_raise_stops_before_the_update(check: str, bug: str, at_step: int) -> None:
    model = mlp()
    body = Recorder(bug)
    with pytest.raises(gradwatch.IntegrityError, match=check) as caught:
        train(model, adam(model), 10, body, checks={check: "raise"})
    i = at_step - 1
    assert i in body.before and i not in body.after  # raised inside step()
    assert same(snapshot(model), body.before[i])  # the bad update was not applied
    assert torch.isfinite(torch.cat([p.flatten() for p in model.parameters()])).all()
    run = caught.value.run  # type: ignore[attr-defined]
    found = of(run, check)
    assert [(f.step, f.severity) for f in found] == [(at_step, "error")]
    assert run.closed


def test_raise_on_loss_shape_mismatch_stops_before_backward() -> None:
    model = mlp(d_out=1)
    before = snapshot(model)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        nn.MSELoss()(model(x), y[:, 0]).backward()
        opt.step()

    with pytest.raises(gradwatch.IntegrityError, match="loss-shape-mismatch"):
        train(model, adam(model), 5, step, checks={"loss-shape-mismatch": "raise"})
    assert same(snapshot(model), before)
    assert all(p.grad is None for p in model.parameters())


# -- skip ------------------------------------------------------------------------------------
def test_skip_drops_the_bad_update_and_training_goes_on() -> None:
    model = mlp()
    body = Recorder("nan grad", at=5)
    run = train(model, adam(model), 15, body, checks={"nonfinite-grad": "skip"})
    assert run.step == 15
    assert same(body.after[5], body.before[5])  # parameters untouched at that step
    assert same_state(body.state_after[5], body.state_before[5])  # Adam state too
    assert not same(body.after[6], body.before[6])  # the next step trains again
    assert torch.isfinite(torch.cat([p.flatten() for p in model.parameters()])).all()
    assert [(f.step, f.param) for f in of(run, "nonfinite-grad")] == [(6, "2.weight")]


def test_skip_on_stale_grad_skips_the_step_that_would_apply_stale_gradients() -> None:
    model = mlp()
    body = Recorder("no zero_grad")
    run = train(model, adam(model), 10, body, checks={"stale-grad": "skip"})
    assert run.step == 10
    assert same(body.after[1], body.before[1])  # step 2 would apply 2 batches: dropped
    assert not same(body.after[0], body.before[0])
    assert of(run, "stale-grad")[0].step == 2


# -- record / warn / off ---------------------------------------------------------------------
def lines(err: str, check: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("gradwatch:") and check in line]


def test_record_stores_without_printing(capsys: pytest.CaptureFixture[str]) -> None:
    model = mlp()
    run = train(model, adam(model), 10, Recorder("no zero_grad"), checks={"stale-grad": "record"})
    assert [f.step for f in of(run, "stale-grad")] == [2]
    assert lines(capsys.readouterr().err, "stale-grad") == []


def test_warn_prints_one_line_with_the_id_the_step_and_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = mlp()
    run = train(model, adam(model), 30, Recorder("no zero_grad"), checks={"stale-grad": "warn"})
    assert [f.step for f in of(run, "stale-grad")] == [2]  # persists: stored once
    printed = lines(capsys.readouterr().err, "stale-grad")
    assert len(printed) == 1, printed
    assert "stale-grad" in printed[0] and "step 2" in printed[0] and "Fix:" in printed[0]


def test_warn_is_the_default_policy(capsys: pytest.CaptureFixture[str]) -> None:
    model = mlp()
    train(model, adam(model), 5, Recorder("no zero_grad"))
    assert len(lines(capsys.readouterr().err, "stale-grad")) == 1


def test_off_produces_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    model = mlp()
    run = train(model, adam(model), 10, Recorder("no zero_grad"), checks={"stale-grad": "off"})
    assert of(run, "stale-grad") == []
    assert lines(capsys.readouterr().err, "stale-grad") == []


def test_all_off_silences_every_check() -> None:
    model = mlp()
    run = train(model, adam(model), 10, Recorder("nan grad", at=3), checks={"all": "off"})
    assert run.findings == []


# -- policies from the environment -----------------------------------------------------------
def test_env_var_sets_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADWATCH_CHECKS", "stale-grad=raise,loss-plateau=off")
    model = mlp()
    body = Recorder("no zero_grad")
    with pytest.raises(gradwatch.IntegrityError, match="stale-grad"):
        train(model, adam(model), 10, body)
    assert same(snapshot(model), body.before[1])


def test_env_var_sets_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADWATCH_CHECKS", "stale-grad=off")
    model = mlp()
    run = train(model, adam(model), 10, Recorder("no zero_grad"))
    assert of(run, "stale-grad") == []


def test_watch_checks_override_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADWATCH_CHECKS", "stale-grad=raise")
    model = mlp()
    run = train(model, adam(model), 10, Recorder("no zero_grad"), checks={"stale-grad": "record"})
    assert [f.step for f in of(run, "stale-grad")] == [2]


def test_policies_leave_correct_training_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADWATCH_CHECKS", "all=raise")
    model = mlp()
    run = train(model, adam(model), 30, standard)
    assert [f for f in run.findings if f.severity != "info"] == []
    model = mlp()
    run = train(model, adam(model), 30, standard, checks={"all": "skip"})
    assert run.step == 30 and not same(snapshot(model), snapshot(mlp()))
    assert batch(0)[0].shape[0] > 1
