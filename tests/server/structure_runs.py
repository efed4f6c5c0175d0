"""Tiny real training runs whose structure changes mid-run, and a replicate group of
three where one replicate differs: the fixtures of the structure API and page tests.

Each run is made by a process of its own (tests/own_process.py), as a rerun of a script would be:
runs that one process makes one after another are not replicates of each other.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import gradwatch
from tests.own_process import in_own_process

CLIP_UNTIL = 30  # the clipped run stops calling clip_grad_norm_ from this step on
STEPS = 60
CONFIG = {"lr": 0.01, "width": 8}


@in_own_process
def clip_dropped(name: str = "clip-dropped", project: str = "structure") -> str:
    """An MLP clipped with clip_grad_norm_ on its first CLIP_UNTIL - 1 steps, then never
    again (a resume path that forgot the clipping call), STEPS steps in all."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt, name=name, project=project) as run:
        for step in range(1, STEPS + 1):
            opt.zero_grad()
            model(torch.randn(4, 8)).pow(2).mean().backward()
            if step < CLIP_UNTIL:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    return run.id


@in_own_process(hard_exit=True)
def clip_dropped_unclosed(name: str = "clip-dropped-unclosed", project: str = "structure") -> str:
    """``clip_dropped``'s training in a process that ends without closing the run (killed
    after its steps were written): no END record, so no structure finding is stored."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = gradwatch.watch(model, opt, name=name, project=project)
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        model(torch.randn(4, 8)).pow(2).mean().backward()
        if step < CLIP_UNTIL:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    assert run.flush()
    return run.id  # the process ends with os._exit: close() never runs


@in_own_process
def replicate(
    name: str, seed: int, *, frozen_embedding: bool = False, project: str = "structure"
) -> str:
    """One run of a replicate group (an embedding and a head, 30 steps); with
    ``frozen_embedding`` its embedding gets no gradient (a stale flag of one replicate)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(10, 8), nn.Flatten(), nn.Linear(16, 1))
    if frozen_embedding:
        model[0].requires_grad_(False)
    opt = torch.optim.SGD(list(model.parameters()), lr=0.01)
    with gradwatch.watch(model, opt, name=name, config=CONFIG, project=project) as run:
        for _ in range(30):
            opt.zero_grad()
            model(torch.randint(0, 10, (4, 2))).pow(2).mean().backward()
            opt.step()
    return run.id


def group_of_three(project: str = "structure") -> dict[str, str]:
    """Name → run id of replicates a and b (good) and c (its embedding frozen)."""
    return {
        "twin-a": replicate("twin-a", 1, project=project),
        "twin-b": replicate("twin-b", 2, project=project),
        "twin-c": replicate("twin-c", 3, frozen_embedding=True, project=project),
    }


def record(root: Path) -> dict[str, str]:
    """Train the clipped run and the group of three into the data directory ``root``
    (``$GRADWATCH_DIR`` set for the duration): name → run id."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADWATCH_DIR", str(root))
        for var in ("GRADWATCH_SERVER", "GRADWATCH_JOB", "GRADWATCH_CHECKS"):
            patch.delenv(var, raising=False)
        return {"clip-dropped": clip_dropped(), **group_of_three()}
