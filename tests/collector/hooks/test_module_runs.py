"""``ModuleRuns``: the steps on which the modules of never-trained parameters ran — hooks
only where a parameter has never had a gradient, off after its first one."""

from __future__ import annotations

import torch
from torch import nn

import gradwatch
from tests.collector.checks.common import batch, mse

D_IN, D_OUT = 6, 3


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(D_IN, D_OUT)
        self.b = nn.Linear(D_IN, D_OUT)  # runs on even steps, its output detached
        self.idle = nn.Linear(D_IN, D_OUT)  # never runs
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = self.a(x)
        if self.calls % 2 == 0:
            out = out + self.b(x).detach()
        return out


def test_only_modules_of_never_trained_parameters_stay_followed() -> None:
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = gradwatch.watch(model, opt)
    try:
        for i in range(6):
            x, y = batch(i)
            opt.zero_grad()
            mse(model(x), y).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            model.b(batch(0)[0])  # an evaluation pass: not a training forward
        runs = run.context.model_hooks.runs
        # a: trained at the first backward, its hook came off; b and idle still followed
        assert [len(f.keys) for f in runs._live[0]] == [2, 2]
        names = run.context.watches[0].names
        b, idle = names.index("b.weight"), names.index("idle.weight")
        assert [runs.ran(0, b, s) for s in range(1, 7)] == [False, True] * 3
        assert [runs.ran(0, idle, s) for s in range(1, 7)] == [False] * 6
        assert runs.ran(0, b, 7) is False  # the evaluation pass is not counted
    finally:
        run.close()
    assert not any(f.handle for f in runs._of.values())  # every hook off at close


def test_a_tensor_two_optimizers_hold_is_followed_for_each() -> None:
    # InfoGAN's shape: two optimizers hold b (its output detached: never a gradient); each
    # follows it, and a forward counts for the step each optimizer takes next
    model = Net()
    opt_all = torch.optim.SGD(model.parameters(), lr=0.01)
    opt_ab = torch.optim.SGD([*model.a.parameters(), *model.b.parameters()], lr=0.01)
    run = gradwatch.watch(model, [opt_all, opt_ab])
    try:
        for i in range(4):
            x, y = batch(i)
            for opt in (opt_all, opt_ab):  # b runs in every second forward: opt_ab's
                opt.zero_grad()
                mse(model(x), y).backward()
                opt.step()
        runs = run.context.model_hooks.runs
        b0 = run.context.watches[0].names.index("b.weight")
        b1 = run.context.watches[1].names.index("b.weight")
        assert [runs.ran(1, b1, s) for s in range(1, 5)] == [True] * 4
        # opt_all's next step is s + 1 when opt_ab's forward runs b
        assert [runs.ran(0, b0, s) for s in range(1, 5)] == [False, True, True, True]
    finally:
        run.close()
