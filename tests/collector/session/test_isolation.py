"""Nothing gradwatch raises internally at step time reaches the training loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.stats import tensors as stats


def test_internal_errors_are_counted_reported_once_and_training_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(self: stats.StepStats, **kwargs: object) -> stats.PreStep:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(stats.StepStats, "before_step", broken)
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    with gradwatch.watch(model, opt) as run:
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
    assert run.context.internal_errors == 3
    assert not torch.equal(before, model.weight)  # the optimizer still stepped
    err = capsys.readouterr().err
    assert err.count("gradwatch: internal error in step pre-hook") == 1
    assert "injected fault" in err and "training continues" in err


def test_user_errors_in_backward_are_the_users() -> None:
    """A backward that fails for the user's own reason raises exactly as without gradwatch."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt):
        loss = model(torch.randn(2, 4)).sum().detach()
        with pytest.raises(RuntimeError, match="does not require grad"):
            loss.backward()
