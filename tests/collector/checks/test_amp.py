"""``amp-overflow``: GradScaler skips are reported as such, never as ``nonfinite-grad``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.reader import load_run


def train(overflow_at: set[int], steps: int = 8, init_scale: float = 2.0**10) -> gradwatch.Run:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    with gradwatch.watch(model, opt, scaler=scaler) as run:
        for i in range(steps):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            if i in overflow_at:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    return run


def test_each_skip_is_an_info_finding_and_not_a_nonfinite_grad() -> None:
    run = train({2, 5})
    checks = [(f.check, f.severity, f.step) for f in run.findings]
    assert ("amp-overflow", "info", 3) in checks
    assert ("amp-overflow", "info", 5) in checks  # the 4th optimizer step would follow
    assert not [c for c in checks if c[0].startswith("nonfinite")]
    assert len([c for c in checks if c[0] == "amp-overflow"]) == 2


def test_more_than_three_skips_in_a_row_is_a_warning() -> None:
    run = train({1, 2, 3, 4, 5}, steps=10)
    severities = [f.severity for f in run.findings if f.check == "amp-overflow"]
    assert severities[:3] == ["info"] * 3 and "warning" in severities[3:]


def test_a_collapsed_scale_is_an_error() -> None:
    run = train({1, 2}, init_scale=2.0)
    errors = [f for f in run.findings if f.check == "amp-overflow" and f.severity == "error"]
    assert errors and errors[0].details["scale"] <= 1


def test_recorded_loss_is_unscaled() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    losses = []
    with gradwatch.watch(model, opt, scaler=scaler) as run:
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
