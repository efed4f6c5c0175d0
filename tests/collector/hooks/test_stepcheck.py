"""The row checks of a window of collected steps: runs of quiet rows are checked together
(``CheckEngine.take_rows``), everything else row by row. Both paths must report the same
findings at the same steps and leave the same histories, whatever the window boundaries.

Each test feeds the same synthetic rows — NaN/±Inf, missing and zero gradients, growth
streaks, spikes, vanishing gradients, update ratios out of range, LR warm-up and decay,
frozen tensors, stuck tensors, loss NaN/plateau/divergence, an LR jump and an LR
collapse — to two real runs, one of them
held to the row-by-row reference, in windows of random sizes."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.checks.engine import CheckEngine
from gradwatch.stats.rows import LEADING
from gradwatch.stats.tensors import GRAD, NONFINITE, PARAM, UPDATE
from gradwatch.transport.record_builder import StepMeta

NAN, INF = float("nan"), float("inf")
NUMEL = [32, 8, 64, 8, 16, 2]  # Linear(4,8), Linear(8,8), Linear(8,2): weight, bias each
T = len(NUMEL)
MATRICES = [0, 2, 4]


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    groups = [
        {"params": list(model[0].parameters())},
        {"params": list(model[2].parameters()) + list(model[4].parameters())},
    ]
    return model, torch.optim.SGD(groups, lr=0.1)


GROUP_OF = [0, 0, 1, 1, 1, 1]


def scenario(seed: int, n: int = 700) -> tuple[torch.Tensor, list[StepMeta]]:
    """``n`` rows of one optimizer with every kind of event at random places."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    grad = torch.exp(torch.randn(n, T, generator=gen, dtype=torch.float64) * 0.3) * 0.1
    grad[:, 1] *= 1e-8  # a bias feeding a normalisation layer: zero up to rounding
    nonfinite = torch.zeros(n, T, dtype=torch.float64)
    param = 1.0 + torch.rand(n, T, generator=gen, dtype=torch.float64)
    ratio = torch.exp(torch.randn(n, T, generator=gen, dtype=torch.float64) * 0.3) * 1e-2
    loss = [2.0 * math.exp(-i / 300) + 0.05 * rng.random() for i in range(n)]
    has_loss = [True] * n
    has_grad = [[True] * T for _ in range(n)]
    trainable = [[True] * T for _ in range(n)]
    lr = [[0.1, 0.1] for _ in range(n)]
    for i in range(30):  # warm-up of group 0
        lr[i][0] = 0.1 * (i + 1) / 30
    for i in range(n - 40, n):  # decay of group 1
        lr[i][1] = 0.001

    def at(length: int) -> int:
        return rng.randrange(12, n - length - 1)

    for _ in range(3):  # NaN / ±Inf gradients
        i, t = at(1), rng.randrange(T)
        grad[i, t] = rng.choice([NAN, INF, -INF])
        nonfinite[i, t] = rng.randrange(1, 5)
    grad[:5, T - 1] = 0.0  # a tensor that has never trained: zero gradients from step 1
    grad[6:9] = 0.0  # every gradient exactly zero for 3 steps (clip value 0)
    for k in (4, rng.randrange(1, 6)):  # a tensor that trained, then misses a few steps
        i, t = at(6), rng.randrange(T)
        for j in range(i, i + k):
            grad[j, t] = 0.0
            has_grad[j][t] = rng.random() < 0.5
    for k in (6, rng.randrange(3, 8), rng.randrange(3, 8)):  # growth streaks
        i, t = at(8), rng.randrange(T)
        for j in range(1, k + 1):
            grad[i + j, t] = grad[i, t] * 2.5**j
    for _ in range(3):  # one-step spikes
        grad[at(1), rng.randrange(T)] *= rng.choice([20.0, 300.0, 1e9])
    for k in (6, rng.randrange(2, 8)):  # every gradient small for a while: vanishing
        i = at(8)
        grad[i : i + k] *= 1e-6
    i = at(8)  # the first layer's gradient far below the last one's
    grad[i : i + rng.randrange(3, 8), 0] *= 1e-5
    for k in (25, rng.randrange(10, 30)):  # updates too small for a while (warning)
        i, t = at(30), rng.choice(MATRICES)
        ratio[i : i + k, t] = 1e-5
    for k in (4, rng.randrange(1, 6)):  # updates too large (error)
        i, t = at(6), rng.choice(MATRICES)
        ratio[i : i + k, t] = 20.0
    for k in (4, rng.randrange(1, 6)):  # a tensor with a gradient that does not move
        i, t = at(6), rng.choice([0, 2, 3, 4, 5] if k == 4 else range(T))
        ratio[i : i + k, t] = 0.0
    for moved in (1e-3, rng.choice([0.0, 1e-3])):  # frozen for a while, moved or not
        i, t = at(6), rng.randrange(T)
        for j in range(i, i + rng.randrange(2, 6)):
            trainable[j][t] = False
            ratio[j, t] = moved
    j = rng.randrange(40, n // 2)  # an LR jump of group 0 for a few steps
    for i in range(j, j + rng.randrange(1, 6)):
        lr[i][0] = 100.0
    for i in range(n - 220, n):  # then its LR collapses for good (a per-batch scheduler)
        lr[i][0] = 1e-7
    param[at(1), rng.randrange(T)] = NAN
    for j in range(*(lambda s: (s, s + 25))(at(26))):  # a plateau
        loss[j] = 0.5
    s = at(70)  # divergence, long enough to hold past loss-diverging's persistence
    for j in range(s, s + 60):
        loss[j] = loss[s] * 1.3 ** (j - s)
    loss[at(1)] = NAN  # after the plateau and the divergence, which would overwrite it
    for _ in range(5):
        has_loss[at(1)] = False
    i = at(1)  # a spike passed on to the update in full (the others: absorbed, as by Adam)
    grad[i] *= 300.0
    ratio[i] *= 10.0
    for still in (1e-6, rng.choice([1e-6, 1.0])):  # small gradients for longer than a transient
        i, k = at(26), rng.randrange(20, 26)
        grad[i : i + k] *= 1e-6
        ratio[i : i + k] *= still  # the weights stand still, or an adaptive optimizer moves them
    i, k = at(26), rng.randrange(20, 26)  # the first layer's gradient far below the last one's
    grad[i : i + k, 0] *= 1e-5
    ratio[i : i + k, 0] *= rng.choice([1e-5, 1.0])  # and its pace, or not
    return rows(grad, nonfinite, param, ratio, loss, has_loss, has_grad, trainable, lr)


def rows(
    grad: torch.Tensor,
    nonfinite: torch.Tensor,
    param: torch.Tensor,
    ratio: torch.Tensor,
    loss: list[float],
    has_loss: list[bool],
    has_grad: list[list[bool]],
    trainable: list[list[bool]],
    lr: list[list[float]],
) -> tuple[torch.Tensor, list[StepMeta]]:
    """The rows and metadata of steps 1..n (update norms: ``ratio`` × the previous ‖θ‖)."""
    n = len(loss)
    previous = param[0]
    update = torch.empty_like(param)
    for j in range(n):
        update[j] = ratio[j] * previous
        previous = param[j]
    data = torch.zeros(n, LEADING + 4 * T, dtype=torch.float64)
    data[:, 0] = torch.tensor(loss, dtype=torch.float64)
    stats = data[:, LEADING:].view(n, 4, T)
    stats[:, GRAD], stats[:, PARAM] = grad, param
    stats[:, UPDATE], stats[:, NONFINITE] = update, nonfinite
    metas = [
        StepMeta(
            step=j + 1,
            n_backward=1,
            lr=lr[j],
            wall_time=0.01,
            phases=(0.0, 0.0, 0.0),
            events=[],
            has_grad=has_grad[j],
            has_loss=has_loss[j],
            batch=[],
            requires_grad=trainable[j],
        )
        for j in range(n)
    ]
    return data, metas


def feed(
    tmp_path: Path, name: str, checks: dict[str, str], seed: int, reference: bool
) -> gradwatch.Run:
    model, optimizer = model_and_optimizer()
    grads_only = checks.get("stats") == "grad-norms"
    options: dict[str, Any] = {"stats": "grad-norms"} if grads_only else {}
    checks = {k: v for k, v in checks.items() if k != "stats"}
    run = gradwatch.watch(model, optimizer, data_dir=tmp_path / name, checks=checks, **options)
    engine: CheckEngine = run.context.checks
    if reference:  # every row on its own: the reference path
        engine.row_by_row = True
    watch = run.context.watches[0]
    data, metas = scenario(seed)
    if grads_only:  # parameter and update norms are not measured
        data[:, LEADING + T * PARAM : LEADING + T * (UPDATE + 1)] = NAN
    rng = random.Random(seed + 1)
    i = 0
    while i < len(metas):
        k = rng.randrange(1, 60)
        watch.checker.check_rows(data[i : i + k].clone(), metas[i : i + k])
        i += k
    return run


def findings(run: gradwatch.Run) -> list[tuple[Any, ...]]:
    return sorted(
        (f.step, f.check, f.param or "", f.severity, f.message, repr(f.details))
        for f in run.context.checks.sink.findings
    )


def histories(run: gradwatch.Run) -> dict[str, Any]:
    engine: CheckEngine = run.context.checks
    out: dict[str, Any] = {}
    for o, s in engine.numerics._state.items():
        for f in dataclasses.fields(s):
            value = getattr(s, f.name)
            if isinstance(value, torch.Tensor):
                value = value.tolist()
            elif isinstance(value, dict):
                value = {
                    k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in value.items()
                }
            out[f"{o}.{f.name}"] = value
    out["lr"] = {o: dataclasses.asdict(g) for o, g in engine.lr._groups.items()}
    out["lr_jumped"] = engine.lr._jumped
    out["deep"] = engine.numerics._deep
    out["no_grad"] = {k: v.tolist() for k, v in engine.coverage._no_grad.items()}
    out["not_updated"] = {k: v.tolist() for k, v in engine.coverage._not_updated.items()}
    out["episodes"] = sorted(engine.coverage._calm.items())  # open episodes, calm steps
    losses = engine.losses
    out["losses"] = (list(losses._recent.get(0, [])), losses._best, losses._count, losses._noise)
    out["active"] = sorted(engine.sink._active, key=repr)
    return out


CONFIGS = [
    {},
    {"exploding-grad": "off"},
    {"vanishing-grad": "off", "nonfinite-grad": "off"},
    {"update-ratio": "record", "loss-plateau": "off", "param-no-grad": "off"},
    {"nonfinite-loss": "skip"},  # a policy that acts: every row takes the reference path
    {"stats": "grad-norms"},  # watch(stats="grad-norms"): no parameter or update norms
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("config", range(len(CONFIGS)))
def test_windows_of_rows_find_what_rows_one_by_one_find(
    tmp_path: Path, seed: int, config: int
) -> None:
    checks = CONFIGS[config]
    fast = feed(tmp_path, "fast", checks, seed, reference=False)
    slow = feed(tmp_path, "slow", checks, seed, reference=True)
    try:
        assert findings(fast) == findings(slow)
        # nan != nan: compare the histories through their repr
        assert repr(histories(fast)) == repr(histories(slow))
        found = {f[1] for f in findings(slow)}
        if not checks:  # the scenario exercises every row check
            assert found >= {
                "nonfinite-grad",
                "exploding-grad",
                "vanishing-grad",
                "param-no-grad",
                "update-ratio",
                "param-not-updated",
                "frozen-param-changed",
                "nonfinite-param",
                "nonfinite-loss",
                "loss-plateau",
                "loss-diverging",
                "lr-jump",
                "lr-collapse",
            }, found
    finally:
        fast.close()
        slow.close()


def test_healthy_rows_are_checked_together(tmp_path: Path) -> None:
    """The point of the window path: a healthy window costs a few ops, not a few per row."""
    model, optimizer = model_and_optimizer()
    run = gradwatch.watch(model, optimizer, data_dir=tmp_path / "run")
    engine: CheckEngine = run.context.checks
    one_by_one: list[int] = []
    reference = run.context.watches[0].checker._check_row

    def counted(row: torch.Tensor, meta: StepMeta, done: bool) -> None:
        one_by_one.append(meta.step)
        reference(row, meta, done)

    run.context.watches[0].checker._check_row = counted  # type: ignore[method-assign]
    n = 12
    gen = torch.Generator().manual_seed(0)
    data, metas = rows(
        torch.exp(torch.randn(n, T, generator=gen, dtype=torch.float64) * 0.05) * 0.1,
        torch.zeros(n, T, dtype=torch.float64),
        1.0 + torch.rand(n, T, generator=gen, dtype=torch.float64),
        torch.full((n, T), 1e-2, dtype=torch.float64),
        [1.0 - 0.01 * j for j in range(n)],
        [True] * n,
        [[True] * T] * n,
        [[True] * T] * n,
        [[0.1, 0.1]] * n,
    )
    try:
        run.context.watches[0].checker.check_rows(data, metas)
        assert one_by_one == [1]  # the first row starts the histories
        assert engine.numerics._state[0].filled == 12
        assert not engine.sink.findings
    finally:
        run.close()
