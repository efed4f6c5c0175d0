"""``clip-before-backward``: gradient clipping before the step's ``backward()`` — the bug
in a real training loop, and its correct twins."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_  # bound before watch(): the helper it calls is seen

from gradwatch.checks.clipping import CLIP_STEPS, misplaced
from tests.collector.checks.common import assert_quiet, first, mlp, mse, of, train

K = 4


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05)


def clip_first(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    mse(model(x), y).backward()
    opt.step()


def test_clipping_before_backward_is_found_at_the_second_step() -> None:
    model = mlp()
    run = train(model, sgd(model), 10, clip_first)
    f = first(run, "clip-before-backward")
    assert (f.step, f.severity, f.optimizer) == (CLIP_STEPS, "warning", 0)
    assert f.message.startswith("clip_grad_norm_ ran before backward() at 2 steps so far")
    assert len(of(run, "clip-before-backward")) == 1  # one finding while it goes on


def test_clip_value_before_backward_of_stale_gradients_is_found() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i:  # (torch's clip_grad_value_ fails when no gradient exists yet)
            nn.utils.clip_grad_value_(model.parameters(), 0.1)  # the previous step's gradients
        opt.zero_grad(set_to_none=False)
        mse(model(x), y).backward()
        opt.step()

    model = mlp()
    f = first(train(model, sgd(model), 10, step), "clip-before-backward")
    assert f.step == CLIP_STEPS + 1 and f.details["function"] == "clip_grad_value_"


def test_clipping_after_backward_is_quiet_and_ends_an_episode() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i < 3:
            return clip_first(i, model, opt, x, y)
        opt.zero_grad()
        mse(model(x), y).backward()
        clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    model = mlp()
    run = train(model, sgd(model), 10, step)
    assert [f.step for f in of(run, "clip-before-backward")] == [2]
    model = mlp()
    run = train(model, sgd(model), 10, lambda i, *a: step(i + 3, *a))
    assert_quiet(run)


def test_clipping_after_each_micro_batch_with_accumulation_is_quiet() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        for k in range(K):
            mse(model(x[k::K]), y[k::K]).div(K).backward()
            clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    model = mlp()
    assert_quiet(train(model, sgd(model), 10, step, accumulation_steps=K))


def test_clipping_another_models_parameters_is_quiet() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        clip_grad_norm_(other.parameters(), 1.0)
        opt.zero_grad()
        mse(model(x), y).backward()
        opt.step()

    model = mlp()
    other = copy.deepcopy(model)
    assert_quiet(train(model, sgd(model), 10, step))


def test_unscale_then_clip_with_a_grad_scaler_is_quiet() -> None:
    scaler = torch.amp.GradScaler("cpu")

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        scaler.scale(mse(model(x), y)).backward()
        scaler.unscale_(opt)
        clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()

    model = mlp()
    assert_quiet(train(model, sgd(model), 10, step, scaler=scaler))


def test_the_clip_runs_unchanged_on_a_generator_of_parameters() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        twin.load_state_dict(model.state_dict())
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            q.grad = None if p.grad is None else p.grad.clone()
        norms.append(nn.utils.clip_grad_norm_((p for p in model.parameters()), 0.01))
        expected.append(
            torch.nn.utils.clip_grad.clip_grad_norm_.__gradwatch_original__(
                list(twin.parameters()), 0.01
            )
        )
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None and torch.equal(p.grad, q.grad)
        opt.step()

    model = mlp()
    twin = copy.deepcopy(model)
    norms: list[torch.Tensor] = []
    expected: list[torch.Tensor] = []
    assert_quiet(train(model, sgd(model), 3, step))
    assert len(norms) == 3 and all(torch.equal(a, b) for a, b in zip(norms, expected, strict=True))
    assert not hasattr(nn.utils.clip_grad_norm_, "__gradwatch_original__")  # restored


def e(kind: str, detail: str = "") -> tuple[str, float, str]:
    return (kind, 0.0, detail)


def test_misplaced_reads_the_order_of_a_steps_events() -> None:
    clip, bw, zero = e("clip", "clip_grad_norm_"), e("backward"), e("zero_grad")
    assert misplaced([zero, clip, bw]) == "clip_grad_norm_"
    assert misplaced([clip, bw, clip, bw]) == "clip_grad_norm_"
    assert misplaced([zero, bw, clip]) is None
    assert misplaced([bw, clip, bw, clip]) is None  # after each micro-batch
    assert misplaced([clip, bw, bw, clip]) is None
    assert misplaced([zero, bw]) is None
    assert misplaced([clip]) is None  # no backward at all: step-without-backward's
