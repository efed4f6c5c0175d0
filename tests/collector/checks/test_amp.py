"""``amp-overflow``: GradScaler skips are reported as such, never as ``nonfinite-grad``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.core.local_reader import load_run


def train(
    overflow_at: set[int], steps: int = 8, init_scale: float = 2.0**10, *, given: bool = True
) -> gradwatch.Run:
    """``given``: pass ``scaler=``; else gradwatch finds the scaler by itself."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    with gradwatch.watch(model, opt, **({"scaler": scaler} if given else {})) as run:
        for i in range(steps):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            if i in overflow_at:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    return run


@pytest.mark.parametrize("given", [True, False], ids=["scaler=", "detected"])
def test_each_skip_is_an_info_finding_and_not_a_nonfinite_grad(given: bool) -> None:
    run = train({2, 5}, given=given)
    checks = [(f.check, f.severity, f.step) for f in run.findings]
    assert ("amp-overflow", "info", 3) in checks
    assert ("amp-overflow", "info", 5) in checks  # the 4th optimizer step would follow
    assert not [c for c in checks if c[0].startswith("nonfinite")]
    assert len([c for c in checks if c[0] == "amp-overflow"]) == 2


@pytest.mark.parametrize("given", [True, False], ids=["scaler=", "detected"])
def test_more_than_three_skips_in_a_row_is_a_warning(given: bool) -> None:
    run = train({1, 2, 3, 4, 5}, steps=10, given=given)
    severities = [f.severity for f in run.findings if f.check == "amp-overflow"]
    assert severities[:3] == ["info"] * 3 and "warning" in severities[3:]


def test_a_collapsed_scale_is_an_error() -> None:
    run = train({1, 2}, init_scale=2.0)
    errors = [f for f in run.findings if f.check == "amp-overflow" and f.severity == "error"]
    assert errors and errors[0].details["scale"] <= 1


@pytest.mark.parametrize("given", [True, False], ids=["scaler=", "detected"])
def test_recorded_loss_is_unscaled(given: bool) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    losses = []
    with gradwatch.watch(model, opt, **({"scaler": scaler} if given else {})) as run:
        for _ in range(3):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            losses.append(loss.item())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    got = [row.loss for row in load_run(run.dir).steps[0]]
    assert got == pytest.approx(losses, rel=1e-6)


def test_scaler_must_be_a_grad_scaler() -> None:
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(gradwatch.ConfigError, match=r"scaler must be a torch\.amp\.GradScaler"):
        gradwatch.watch(model, opt, scaler=object())


def test_detection_restores_the_class_and_skips_a_disabled_scaler() -> None:
    original = torch.amp.GradScaler.scale
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        assert torch.amp.GradScaler.scale is not original  # waiting for a scaler
        off = torch.amp.GradScaler("cpu", enabled=False)
        off.scale(model(torch.ones(1, 4)).sum()).backward()
        assert run._scaler_watch is None
        on = torch.amp.GradScaler("cpu")
        on.scale(model(torch.ones(1, 4)).sum())
        assert run._scaler_watch is not None and run._scaler_watch.scaler is on
        assert torch.amp.GradScaler.scale is original  # no run waits any more
