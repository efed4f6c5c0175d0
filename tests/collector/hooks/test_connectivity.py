"""Loose parameters the loss reaches: a layer cut from the optimizer is an error, a copy of
the trained model that feeds the same loss (a target network) is said as what it is."""

from __future__ import annotations

import torch
from torch import nn

import gradwatch


class Qnet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def loose(both: bool) -> list[gradwatch.Finding]:
    """Findings of param-not-in-optimizer when a second Qnet feeds the loss, with (``both``)
    or without the trained one."""
    torch.manual_seed(0)
    q, q_target = Qnet(), Qnet()
    opt = torch.optim.SGD(q.parameters(), lr=0.01)
    with gradwatch.watch(q, opt, checks={"param-not-in-optimizer": "record"}) as run:
        for _ in range(3):
            opt.zero_grad()
            x = torch.randn(4, 4)
            out = q_target(x).sum() + (q(x).sum() if both else 0.0)
            out.backward()
            opt.step()
    return [f for f in run.findings if f.check == "param-not-in-optimizer"]


def test_a_copy_feeding_the_loss_that_trains_the_model_is_a_target_network() -> None:
    found = loose(both=True)
    assert [(f.severity, f.step) for f in found] == [("info", 1)]
    assert found[0].message.startswith("4 tensors of a second Qnet (a copy of the trained one")


def test_a_copy_alone_in_the_loss_is_still_cut_from_the_optimizer() -> None:
    found = loose(both=False)
    assert [f.severity for f in found] == ["error"]
    assert "no watched module and no optimizer holds them" in found[0].message
