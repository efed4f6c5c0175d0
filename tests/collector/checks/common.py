"""Shared pieces of the per-check tests: tiny seeded models, deterministic batches, one
training loop with a replaceable step, and helpers to read a run's findings.

A test describes its bug (or its correct twin) as a *step function*
``step(i, model, opt, x, y)`` that does one iteration of the training loop; :func:`train`
watches the model, runs the loop and closes the run (also when a check raises).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

import gradwatch
from gradwatch.checks.findings import Finding
from gradwatch.session.handle import Run

Batch = tuple[torch.Tensor, torch.Tensor]
Step = Callable[[int, nn.Module, Any, torch.Tensor, torch.Tensor], None]

D_IN, HIDDEN, D_OUT, N = 6, 8, 3, 32


def mlp(seed: int = 0, *, d_in: int = D_IN, hidden: int = HIDDEN, d_out: int = D_OUT) -> nn.Module:
    """``Linear -> ReLU -> Linear``; parameters ``0.weight, 0.bias, 2.weight, 2.bias``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))


def batch(i: int, *, n: int = N, d_in: int = D_IN, d_out: int = D_OUT) -> Batch:
    """The ``i``-th mini-batch of a fixed regression problem (same ``i``, same batch)."""
    g = torch.Generator().manual_seed(1000 + i)
    x = torch.randn(n, d_in, generator=g)
    w = torch.linspace(-1.0, 1.0, d_in * d_out).reshape(d_in, d_out)
    return x, x @ w + 0.1 * torch.randn(n, d_out, generator=g)


def mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out, y)


def standard(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    """The correct loop body: zero_grad, forward, backward, step."""
    opt.zero_grad()
    mse(model(x), y).backward()
    opt.step()


def train(
    model: nn.Module | dict[str, nn.Module],
    opt: Any,
    steps: int = 30,
    step: Step = standard,
    *,
    data: Callable[[int], Batch] = batch,
    **watch_kwargs: Any,
) -> Run:
    """Watch ``model``/``opt``, run ``steps`` iterations of ``step`` and close the run.

    An exception from the loop (``IntegrityError`` of a ``raise`` policy) propagates after
    the run is closed; the run is then reachable as ``exc.run`` (set here for the tests).
    """
    run = gradwatch.watch(model, opt, **watch_kwargs)
    try:
        for i in range(steps):
            x, y = data(i)
            step(i, model, opt, x, y)  # type: ignore[arg-type]
    except BaseException as exc:
        run.close("failed")
        exc.run = run  # type: ignore[attr-defined]
        raise
    run.close()
    return run


def of(run: Run, check: str) -> list[Finding]:
    """The findings of one check."""
    return [f for f in run.findings if f.check == check]


def problems(run: Run) -> list[Finding]:
    """Every warning or error finding (info findings are allowed in correct runs)."""
    return [f for f in run.findings if f.severity != "info"]


def describe(findings: Iterable[Finding]) -> list[tuple[str, str, int | None, str | None]]:
    """Short tuples for readable assertion messages."""
    return [(f.check, f.severity, f.step, f.param) for f in findings]


def assert_quiet(run: Run) -> None:
    """No warning or error finding at all."""
    bad = problems(run)
    assert bad == [], describe(bad)


def first(run: Run, check: str) -> Finding:
    """The first finding of ``check`` (fails with every finding listed when none)."""
    found = of(run, check)
    assert found, f"no {check} finding; got {describe(run.findings)}"
    return found[0]


def snapshot(model: nn.Module) -> list[torch.Tensor]:
    """A copy of every parameter."""
    return [p.detach().clone() for p in model.parameters()]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Bit-identical lists of tensors (NaN equal to NaN)."""
    return len(a) == len(b) and all(
        x.shape == y.shape and bool(((x == y) | (x.isnan() & y.isnan())).all())
        for x, y in zip(a, b, strict=True)
    )
