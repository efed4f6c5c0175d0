"""Tiny real training runs for the analysis tests: one that goes non-finite, and correct
replicates (same seed and config), each logging user scalars that include NaN and ±Inf."""

from __future__ import annotations

import torch
from torch import nn

import gradwatch

STEPS = 40
BAD_STEP = 30  # the step whose loss is multiplied by +Inf in the bad run


def train(
    *, bad: bool, server: str | None = None, seed: int = 0, project: str = "analysis"
) -> gradwatch.Run:
    """``STEPS`` SGD steps of a small MLP with two parameter groups; the bad run's loss is
    multiplied by +Inf at ``BAD_STEP`` (infinite and NaN gradients, then NaN parameters)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.SGD(
        [
            {"params": model[0].parameters(), "lr": 0.05},
            {"params": model[2].parameters(), "lr": 0.1},
        ]
    )
    data = torch.randn(STEPS, 4, 6, generator=torch.Generator().manual_seed(seed))
    config = {"lr": 0.1, "width": 8, "bad": bad}
    with gradwatch.watch(model, opt, project=project, config=config, server=server) as run:
        for i in range(STEPS):
            opt.zero_grad()
            loss = model(data[i]).pow(2).mean()
            if bad and i + 1 == BAD_STEP:
                loss = loss * float("inf")
            loss.backward()
            opt.step()
            run.log({"accuracy": i / STEPS})
            if i % 10 == 3:
                run.log({"spike": [float("inf"), float("-inf"), float("nan"), -0.0][i // 10]})
    return run
