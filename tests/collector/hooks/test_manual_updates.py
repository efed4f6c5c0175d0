"""Loops that update their parameters by hand, without ``torch.optim``
(gradwatch.hooks.manual_updates): ``gradwatch.watch(model)`` and ``gradwatch run`` count one
step per update, collect the statistics and run the checks that apply; correct loops stay quiet."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.core.local_reader import load_run
from tests.collector.checks.common import assert_quiet, batch, first, mlp, mse

STEPS = 30
LR = 0.05


def update(model: nn.Module, how: str) -> None:
    if how == ".data":
        for p in model.parameters():
            p.data.add_(-LR * p.grad)  # type: ignore[operator]
    else:
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad  # type: ignore[operator]


def loop(model: nn.Module, how: str, steps: int = STEPS, *, clear: bool = True, **kw: Any) -> Any:
    run = gradwatch.watch(model, **kw)
    for i in range(steps):
        x, y = batch(i)
        if clear:
            model.zero_grad()
        mse(model(x), y).backward()
        update(model, how)
    run.close()
    return run


@pytest.mark.parametrize("how", [".data", "no_grad"])
def test_a_manual_sgd_loop_is_watched_step_by_step_and_quiet(how: str) -> None:
    model = mlp()
    run = loop(model, how)
    assert run.step == STEPS
    assert_quiet(run)
    steps = load_run(run.dir).steps[0]
    assert [r.step for r in steps] == list(range(1, STEPS + 1))
    # the update norm is the real one: lr × the gradient norm for plain SGD
    grad, _, moved, _ = zip(*steps[3].stats, strict=True)
    assert list(moved) == pytest.approx([LR * g for g in grad], rel=1e-4)


def test_a_manual_loop_without_clearing_gradients_is_stale_grad() -> None:
    model = mlp()
    run = loop(model, "no_grad", 10, clear=False)
    found = first(run, "stale-grad")
    assert found.step == 2
    # the fix a loop without an optimizer can apply: there is no optimizer.zero_grad()
    assert found.hint.startswith("clear the gradients once per update by hand")
    assert "optimizer.zero_grad" not in found.hint


def test_an_evaluation_after_the_last_update_is_not_eval_mode_training() -> None:
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.1), nn.Linear(8, 3))
    run = gradwatch.watch(model)
    for _epoch in range(3):
        model.train()
        for i in range(10):
            x, y = batch(i)
            model.zero_grad()
            mse(model(x), y).backward()
            update(model, ".data")
        model.eval()
        with torch.no_grad():
            model(batch(99)[0])
    run.close()
    assert run.step == 30
    assert_quiet(run)


def test_accumulation_by_hand_counts_one_step_per_update() -> None:
    model = mlp()
    run = gradwatch.watch(model, accumulation_steps=4)
    for i in range(40):
        x, y = batch(i)
        (mse(model(x), y) / 4).backward()
        if (i + 1) % 4 == 0:
            update(model, "no_grad")
            model.zero_grad()
    run.close()
    assert run.step == 10
    assert_quiet(run)


def test_a_watched_model_saved_whole_loads_without_gradwatch_objects() -> None:
    """torch.save(model) as pytorch/examples' word_language_model does, then a
    weights_only load that allows only the model's own classes."""
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    run = gradwatch.watch(model)
    model.zero_grad()
    mse(model(batch(0)[0]), batch(0)[1]).backward()
    buf = io.BytesIO()
    torch.save(model, buf)
    run.close()
    buf.seek(0)
    with torch.serialization.safe_globals([nn.Sequential, nn.Linear, nn.ReLU]):
        loaded = torch.load(buf)
    assert not loaded._forward_hooks and not loaded._forward_pre_hooks
    assert "zero_grad" not in vars(loaded)


def test_watch_without_an_optimizer_needs_trainable_parameters() -> None:
    model = mlp().requires_grad_(False)
    with pytest.raises(gradwatch.ConfigError, match="trainable"):
        gradwatch.watch(model)


@pytest.mark.parametrize("how", ["None", "zero_"], ids=["p.grad = None", "p.grad.zero_()"])
def test_gradients_cleared_by_hand_after_the_update_are_not_stale(how: str) -> None:
    model = mlp()
    run = gradwatch.watch(model)
    for i in range(STEPS):
        x, y = batch(i)
        for p in model.parameters():
            if how == "None":
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
        mse(model(x), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        update(model, "no_grad")
    run.close()
    assert run.step == STEPS
    assert_quiet(run)
