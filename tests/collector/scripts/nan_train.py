"""Real training scripts that go non-finite, one per cause, for the NaN provenance tests.

Usage: python nan_train.py CASE [--steps N] [--bad-step K]

Every case trains a small seeded classifier (Adam, or SGD for ``huge-lr``) on fixed
batches; at step ``K`` (1-based) the cause strikes:

* ``log-softmax``: the head computes ``log(softmax(z))``; a batch of huge inputs makes the
  softmax underflow to 0 → ``log(0)``.
* ``exp-overflow``: a positive scale ``exp(z)`` overflows on a batch of huge inputs.
* ``batch-stat``: a hand-written normaliser divides by the batch standard deviation; a
  batch of identical samples makes it 0.
* ``nan-input``: one sample of the batch holds a NaN.
* ``huge-lr``: the learning rate is set to 1e38 (a schedule bug): the weights overflow.
* ``sqrt-zero``: a norm ``sqrt(Σx²)`` of an all-zero row: finite forward, infinite derivative.
* ``loss-log``: the loss computes ``log(softmax(out))`` outside the model.

Run it under ``gradwatch run`` (the resume test does), or import it: :func:`train` runs a
case under ``gradwatch.watch``.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn
from torch.nn import functional

CASES = (
    "log-softmax",
    "exp-overflow",
    "batch-stat",
    "nan-input",
    "huge-lr",
    "sqrt-zero",
    "loss-log",
)
D_IN, HIDDEN, CLASSES, N = 6, 16, 4, 32


class LogProbs(nn.Module):
    """The bug: ``log(softmax(z))`` instead of ``log_softmax(z)``."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.softmax(z, dim=-1))


class PositiveScale(nn.Module):
    """A learned positive scale: ``exp`` of a linear map."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * torch.exp(self.proj(h))


class BatchStandardize(nn.Module):
    """A hand-written batch normalisation without the epsilon."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(dim=0)) / x.std(dim=0)


class RowNorm(nn.Module):
    """Appends each row's Euclidean norm, ``sqrt(Σx²)`` (no epsilon)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, torch.sqrt((x * x).sum(dim=-1, keepdim=True))], dim=-1)


class Net(nn.Module):
    """``[features] → body (Linear, ReLU) → [norm] → [mid] → head (Linear) → [out]``."""

    def __init__(self, case: str) -> None:
        super().__init__()
        width = D_IN + 1 if case == "sqrt-zero" else D_IN
        self.features: nn.Module = nn.Identity()
        if case == "sqrt-zero":
            self.features = nn.Sequential(nn.Linear(D_IN, D_IN, bias=False), RowNorm())
        self.body = nn.Sequential(nn.Linear(width, HIDDEN), nn.ReLU())
        self.norm = BatchStandardize() if case == "batch-stat" else nn.Identity()
        self.mid = PositiveScale() if case == "exp-overflow" else nn.Identity()
        self.head = nn.Linear(HIDDEN, CLASSES)
        self.out = LogProbs() if case == "log-softmax" else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.head(self.mid(self.norm(self.body(self.features(x))))))


def batch(case: str, step: int, bad_step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of ``step`` (1-based): fixed random data, with the fault at ``bad_step``."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(N, D_IN, generator=g)
    y = torch.randint(0, CLASSES, (N,), generator=g)
    if step != bad_step:
        return x, y
    if case in ("log-softmax", "exp-overflow"):
        x = x * 1e4  # unnormalised inputs
    elif case == "batch-stat":
        x = x[:1].expand(N, D_IN).clone()  # one sample repeated: std is 0
    elif case == "nan-input":
        x[3, 2] = float("nan")  # a corrupt sample
    elif case == "sqrt-zero":
        x[0] = 0.0  # an all-zero row
    return x, y


def loss_of(case: str, out: torch.Tensor, y: torch.Tensor, step: int, bad_step: int) -> Any:
    if case == "log-softmax":
        return functional.nll_loss(out, y)
    if case == "loss-log":
        scale = 1e4 if step == bad_step else 1.0
        return functional.nll_loss(torch.log(torch.softmax(out * scale, dim=-1)), y)
    return functional.cross_entropy(out, y)


def build(case: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net(case)
    if case == "huge-lr":
        return model, torch.optim.SGD(model.parameters(), lr=0.1)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def train_step(
    case: str, model: nn.Module, opt: torch.optim.Optimizer, step: int, bad_step: int
) -> None:
    """One optimizer step, the usual way."""
    if case == "huge-lr" and step == bad_step:
        for group in opt.param_groups:
            group["lr"] = 1e38
    x, y = batch(case, step, bad_step)
    opt.zero_grad()
    loss = loss_of(case, model(x), y, step, bad_step)
    loss.backward()
    opt.step()


def train(case: str, steps: int, bad_step: int, **watch: Any) -> Any:
    """Train under ``gradwatch.watch(**watch)``; returns the closed run. An exception from
    a raising policy propagates (the run is closed first; it is ``exc.run``)."""
    import gradwatch

    model, opt = build(case)
    run = gradwatch.watch(model, opt, **watch)
    try:
        for step in range(1, steps + 1):
            train_step(case, model, opt, step, bad_step)
    except BaseException as exc:
        run.close("failed")
        exc.run = run  # type: ignore[attr-defined]
        raise
    run.close()
    return run


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=CASES)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--bad-step", type=int, default=5)
    args = p.parse_args()
    model, opt = build(args.case)
    for step in range(1, args.steps + 1):
        train_step(args.case, model, opt, step, args.bad_step)


if __name__ == "__main__":
    main()
