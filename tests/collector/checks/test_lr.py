"""Learning-rate checks: ``lr-jump`` and ``lr-collapse`` — each bug in a real training
loop with a real scheduler, and correct schedules that must stay quiet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as sch

from tests.collector.checks.common import assert_quiet, first, mlp, of, standard, train


def with_scheduler(sched: Any) -> Callable[..., None]:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x, y)
        sched.step()

    return step


def test_lr_collapse_a_per_epoch_scheduler_stepped_every_batch_names_it() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = sch.StepLR(opt, step_size=10, gamma=0.1)  # meant for epochs, stepped per batch
    run = train(model, opt, 120, with_scheduler(sched))
    (f,) = of(run, "lr-collapse")
    # LR < 1e-5 of its peak from step 61 (0.1 * 0.1**6); held 50 steps it would be found at
    # step 110, but at step 74 the updates round to nothing (tensors stop changing): the
    # collapse is reported then, and the stuck tensors are its consequence
    assert (f.step, f.severity, f.details["since_step"]) == (74, "warning", 61)
    assert f.details["scheduler"] == "StepLR" and f.details["group"] == 0
    assert "under StepLR" in f.message and "0.1" in f.message
    assert f.role == "cause" and f.details["stuck_tensors"] >= 1
    stuck = of(run, "param-not-updated")
    assert [(s.step, s.role, s.incident) for s in stuck] == [(74, "consequence", f.incident)]


def test_lr_collapse_without_stuck_tensors_waits_for_its_persistence() -> None:
    """Adam's update is about the learning rate whatever the gradient: with momentum the
    parameters keep moving (no tensor is stuck), so the collapse is found once it has
    lasted ``COLLAPSE_MIN_STEPS`` steps."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = sch.StepLR(opt, step_size=10, gamma=0.1)
    run = train(model, opt, 120, with_scheduler(sched))
    found = of(run, "lr-collapse")
    assert len(found) == 1 and found[0].details["since_step"] == 61
    assert found[0].step == 110 or found[0].details["stuck_tensors"] is not None


def test_lr_jump_is_named_at_its_step_with_the_scheduler() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # a warm-up lambda that returns the learning rate instead of a factor after step 20
    sched = sch.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) if s < 20 else 1e4 * 0.01)
    run = train(model, opt, 30, with_scheduler(sched))
    f = first(run, "lr-jump")
    assert f.step == 21  # the first update made with the new learning rate
    assert f.details["scheduler"] == "LambdaLR"
    assert (f.details["before"], f.details["after"]) == (0.01, pytest.approx(1.0))
    assert "from 0.01 to 1" in f.message
    assert len(of(run, "lr-jump")) == 1


QUIET: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "warm-up from 0": lambda o: sch.LambdaLR(o, lambda s: min(1.0, s / 20)),
    "LinearLR to 1e-3": lambda o: sch.LinearLR(o, 1.0, 1e-3, total_iters=120),
    "CosineAnnealingWarmRestarts": lambda o: sch.CosineAnnealingWarmRestarts(o, T_0=30),
    "CyclicLR": lambda o: sch.CyclicLR(o, base_lr=1e-4, max_lr=0.05, step_size_up=15),
    "ExponentialLR over the run": lambda o: sch.ExponentialLR(o, gamma=0.97),
}


@pytest.mark.parametrize("name", list(QUIET))
def test_schedules_over_the_run_are_quiet(name: str) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    assert_quiet(train(model, opt, 120, with_scheduler(QUIET[name](opt))))


# -- a first update far larger than the weights, then a diverging loss ------------------------
def clipped(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    """A step whose gradient is clipped to norm 1: the update is then about the rate, whatever
    the gradient (DP-SGD clips each sample's gradient the same way)."""
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def test_lr_too_large_sgd_whose_first_update_rewrote_the_weights_and_the_loss_diverged() -> None:
    """SGD at 500 with clipping: each update is about 500 in norm, the first one 10x and more
    the weights it changes; clipping keeps every later update about the weights' own size
    (no update-ratio streak), and the loss diverges. The first update is the evidence that
    the rate, not a gradient grown in training, did it: an error naming the rate, the
    incident's cause."""
    model = mlp()
    run = train(model, torch.optim.SGD(model.parameters(), lr=500.0), 60, clipped)
    f = first(run, "lr-too-large")
    assert f.severity == "error" and f.details["first_update_ratio"] >= 10
    assert f.message.startswith("the learning rate (500) is far too large for these weights")
    assert f.details["step_multiplier"] >= 10  # the rate amplified an ordinary gradient
    assert of(run, "loss-diverging"), "the divergence is the second half of the evidence"
    assert f.step == first(run, "loss-diverging").step


def _bn_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 4),
    )


def _images(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + i % 20)
    x = torch.randn(32, 3, 8, 8, generator=g)
    return x, (x.mean(dim=(1, 2, 3)) > 0).long() + 2 * (x[:, 0].mean(dim=(1, 2)) > 0).long()


def _classify(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


@pytest.mark.parametrize(("lr", "steps", "diverges"), [(20.0, 120, True), (11.0, 90, False)])
def test_sgd_first_update_larger_than_the_weights_names_the_rate_only_if_the_loss_diverges(
    lr: float, steps: int, diverges: bool
) -> None:
    """A BatchNorm CNN under SGD (momentum 0.9) at a rate a thousand times too large: its first
    update is several times the head's weights (between 1x and 10x: batch norm keeps the loss
    finite for a while) and 20x the gradient; the loss diverges some 50-80 steps later (47 at
    1 thread, 81 at 2-4: the thread count changes the rounding, and the dynamics are chaotic).
    An update as large as the weights rewrites them (update-ratio's own level), so with the
    divergence that is the rate's error. At 11 the first update is still 4.7 times the
    weights and 11x the gradient, but over 90 steps the loss does not diverge (nor over 120 at
    1-4 threads; at 12 it did at step 116 with 2 threads): no finding."""
    model = _bn_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    run = train(model, opt, steps, _classify, data=_images)
    first_update = run.context.checks.numerics.first_update(0)
    assert first_update is not None and 1 <= first_update[0] < 10, first_update  # the case at hand
    assert first_update[2] is not None and first_update[2] >= 10
    if not diverges:
        assert of(run, "lr-too-large") == [] and of(run, "loss-diverging") == []
        return
    f = first(run, "lr-too-large")
    assert f.severity == "error"
    assert f.message.startswith(f"the learning rate ({lr:g}) is far too large for these weights")
    assert f.step == first(run, "loss-diverging").step


def test_a_first_update_far_larger_than_small_initial_weights_without_divergence_is_quiet() -> None:
    """A head initialised near zero (std 1e-4, as policy heads are) under a usual SGD rate:
    its first update is many times its tiny weights, but the loss falls: no finding."""
    model = mlp()
    with torch.no_grad():
        model[2].weight.mul_(1e-4)
    run = train(model, torch.optim.SGD(model.parameters(), lr=0.05), 60, clipped)
    state = run.context.checks.numerics.first_update(0)
    assert state is not None and state[0] >= 10, state  # the case at hand
    assert of(run, "lr-too-large") == [] and of(run, "loss-diverging") == []
    assert_quiet(run)


def test_a_first_update_made_huge_by_its_gradient_does_not_name_the_rate() -> None:
    """The same first update, 10x the weights and more, made by a gradient 65,536x too large
    (an AMP-scaled loss stepped without its scaler) at an ordinary rate: the loss diverges,
    but the rate multiplied the gradient by 0.01, so the rate is not named; the gradient's
    size is (exploding-grad)."""

    def scaled(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        (65536.0 * nn.functional.mse_loss(model(x), y)).backward()
        opt.step()

    model = mlp()
    run = train(model, torch.optim.SGD(model.parameters(), lr=0.01), 30, scaled)
    first_update = run.context.checks.numerics.first_update(0)
    assert first_update is not None and first_update[0] >= 10, first_update  # the case at hand
    assert of(run, "lr-too-large") == []
