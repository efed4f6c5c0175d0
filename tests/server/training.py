"""A tiny real training loop under gradwatch, and what its spool holds."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.core.local_reader import load_run


def make() -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small model and its optimizer, seeded."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def train(
    run: gradwatch.Run,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    shape: tuple[int, int] = (4, 8),
) -> None:
    """``steps`` optimizer steps on random inputs of ``shape`` (rows, features)."""
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.randn(*shape)).pow(2).mean()
        loss.backward()
        opt.step()


def spooled(run: gradwatch.Run) -> tuple[int, list[float]]:
    """(frames in the run's spool, grad_norm of its first tensor per step)."""
    local = load_run(run.dir)
    rows = local.steps[0]
    return local.records, [row.stats[0][0] for row in rows]


def job_of_two(
    make: Callable[[], gradwatch.Run], monkeypatch: pytest.MonkeyPatch, job: str
) -> tuple[gradwatch.Run, gradwatch.Run, gradwatch.Run]:
    """Two runs made by ``make`` in job ``job`` (``$GRADWATCH_JOB``), then one alone."""
    monkeypatch.setenv("GRADWATCH_JOB", job)
    first, second = make(), make()
    monkeypatch.delenv("GRADWATCH_JOB")
    return first, second, make()


def stale_grad_run(project: str) -> gradwatch.Run:
    """A closed run of 3 steps that never calls zero_grad (a stale-grad error finding),
    its checks recording only."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt, project=project, checks={"all": "record"}) as run:
        for _ in range(3):  # zero_grad is missing: a stale-grad error
            model(torch.randn(8, 3)).pow(2).mean().backward()
            opt.step()
    return run
