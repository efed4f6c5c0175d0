"""``optimizer.step(closure)`` (as Lightning and LBFGS call it): the closure computes the
step's gradients inside ``step()``, so the statistics wait for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.core.local_reader import load_run


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_statistics_are_those_of_the_gradients_the_closure_computed(
    tmp_path: Path, how: str
) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    applied: list[float] = []
    with gradwatch.watch(model, opt, data_dir=tmp_path) as run:
        for _ in range(4):
            x, y = torch.randn(8, 4), torch.randn(8, 2)

            def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                assert model.weight.grad is not None
                applied.append(float(model.weight.grad.norm()))
                return loss

            if how == "keyword":
                opt.step(closure=closure)
            else:
                opt.step(closure)
    rows = load_run(run.dir).steps[0]
    assert [r.stats[0][0] for r in rows] == pytest.approx(applied, rel=1e-6)
    assert [r.n_backward for r in rows] == [1] * 4
    assert run.findings == []
