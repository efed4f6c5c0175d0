"""Optimizer lifecycle checks: ``stale-grad``, ``grad-zeroed-before-step``,
``step-without-backward`` — each bug in a real training loop, and its correct twin."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from tests.collector.checks.common import (
    assert_quiet,
    first,
    mlp,
    mse,
    of,
    standard,
    train,
)

K = 4  # micro-batches per optimizer step in the accumulation tests


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05)


# -- stale-grad ------------------------------------------------------------------------------
def no_zero_grad(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    mse(model(x), y).backward()
    opt.step()


def test_stale_grad_missing_zero_grad_is_an_error_at_the_second_step() -> None:
    model = mlp()
    run = train(model, sgd(model), 10, no_zero_grad)
    f = first(run, "stale-grad")
    assert (f.step, f.severity, f.optimizer, f.param) == (2, "error", 0, None)
    assert f.details["backward_since_clear"] == 2
    assert f.details["backward_since_step"] == 1
    assert f.message and f.hint


def test_stale_grad_zero_grad_forgotten_after_a_refactor_is_found_at_that_step() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i < 10:
            opt.zero_grad()
        mse(model(x), y).backward()
        opt.step()

    model = mlp()
    run = train(model, sgd(model), 20, step)
    assert first(run, "stale-grad").step == 11


@pytest.mark.parametrize("cleared", ["none", "one tensor"])
def test_stale_grad_when_a_clear_through_data_leaves_gradients(cleared: str) -> None:
    """Gradients cleared through ``.data`` move no version counter, so gradwatch looks at
    their values before the next pass (the quiet twins are in test_quiet.py): a loop that
    clears only one tensor that way, or none, still sums stale gradients into the others."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        first_grad = next(iter(model.parameters())).grad
        if cleared == "one tensor" and first_grad is not None:
            first_grad.data.zero_()
        mse(model(x), y).backward()
        opt.step()

    model = mlp()
    run = train(model, sgd(model), 10, step)
    f = first(run, "stale-grad")
    assert (f.step, f.severity) == (2, "error")


def test_stale_grad_with_declared_accumulation_and_no_zero_grad() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        (mse(model(x), y) / K).backward()
        if (i + 1) % K == 0:
            opt.step()  # zero_grad forgotten: the 2nd step applies 2 * K micro-batches

    model = mlp()
    run = train(model, sgd(model), 6 * K, step, accumulation_steps=K)
    f = first(run, "stale-grad")
    assert f.step == 2
    assert f.details["backward_since_clear"] == 2 * K
    assert f.details["declared_accumulation"] == K


def test_stale_grad_correct_twin_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, sgd(model), 30))


# -- grad-zeroed-before-step -----------------------------------------------------------------
def _zero_between(how: str) -> Any:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        mse(model(x), y).backward()
        if how == "optimizer":
            opt.zero_grad()
        elif how == "model":
            model.zero_grad()
        else:
            for p in model.parameters():
                p.grad = None
        opt.step()

    return step


@pytest.mark.parametrize("how", ["optimizer", "model", "by hand"])
def test_grad_zeroed_between_backward_and_step_is_an_error_at_step_1(how: str) -> None:
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    run = train(model, sgd(model), 10, _zero_between(how))
    f = first(run, "grad-zeroed-before-step")
    assert (f.step, f.severity, f.optimizer) == (1, "error", 0)
    assert how.split()[0] in f.details["cleared_by"]
    # the bug is real: nothing trained
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert of(run, "stale-grad") == [] and of(run, "step-without-backward") == []


def test_grad_zeroed_after_the_last_micro_batch_of_an_accumulation() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        (mse(model(x), y) / K).backward()
        if (i + 1) % K == 0:
            opt.zero_grad()  # swapped with step()
            opt.step()

    model = mlp()
    run = train(model, sgd(model), 5 * K, step, accumulation_steps=K)
    f = first(run, "grad-zeroed-before-step")
    assert f.step == 1


def test_grad_zeroed_before_step_correct_twin_is_quiet() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        mse(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    model = mlp()
    assert_quiet(train(model, sgd(model), 30, step))


# -- step-without-backward -------------------------------------------------------------------
def test_step_without_backward_a_second_step_call_is_a_warning_at_that_step() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x, y)
        if i == 5:
            opt.step()  # e.g. a scheduler-like helper that steps the optimizer again

    model = mlp()
    run = train(model, sgd(model), 10, step)
    f = first(run, "step-without-backward")
    assert (f.step, f.severity, f.optimizer) == (7, "warning", 0)
    assert len(of(run, "step-without-backward")) == 1
    assert of(run, "stale-grad") == []


def test_step_without_backward_when_backward_is_skipped_by_mistake() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        loss = mse(model(x), y)
        if i < 3:  # the backward ended up inside a warm-up-only branch
            loss.backward()
        opt.step()

    model = mlp()
    run = train(model, sgd(model), 10, step)
    assert first(run, "step-without-backward").step == 4


def test_step_without_backward_correct_twin_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, sgd(model), 30))


# -- accumulation-wiped ----------------------------------------------------------------------
def zero_grad_every_micro_batch(
    i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor
) -> None:
    opt.zero_grad()  # the bug: inside the micro-batch loop
    (mse(model(x), y) / K).backward()
    if (i + 1) % K == 0:
        opt.step()


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
def test_accumulation_wiped_zero_grad_every_micro_batch_is_an_error_at_step_2(
    declared: bool,
) -> None:
    model = mlp()
    kw = {"accumulation_steps": K} if declared else {}
    run = train(model, sgd(model), 6 * K, zero_grad_every_micro_batch, **kw)
    f = first(run, "accumulation-wiped")
    assert (f.step, f.severity, f.optimizer) == (2, "error", 0)
    assert f.details == {"discarded_backward": K - 1, "backward_since_step": K}
    assert len(of(run, "accumulation-wiped")) == 1  # one episode
    assert of(run, "stale-grad") == of(run, "grad-zeroed-before-step") == []


def test_accumulation_wiped_by_hand_between_micro_batches() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        for p in model.parameters():
            p.grad = None
        (mse(model(x), y) / K).backward()
        if (i + 1) % K == 0:
            opt.step()

    model = mlp()
    assert first(train(model, sgd(model), 4 * K, step), "accumulation-wiped").step == 2


def test_accumulation_wiped_once_is_not_a_finding() -> None:
    """A single discarded backward (a batch skipped on purpose) is not the pattern."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        if i != 5:
            opt.step()

    model = mlp()
    assert_quiet(train(model, sgd(model), 20, step))


def test_gan_generator_loss_reaching_the_discriminator_is_not_a_wipe() -> None:
    """The generator's loss also fills D's gradients (no requires_grad toggle); D clears
    them before its own backward. They were used: by G's step."""
    torch.manual_seed(0)
    g, d = mlp(), nn.Sequential(nn.Linear(3, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g, opt_d = sgd(g), sgd(d)

    def step(i: int, models: Any, opts: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt_d.zero_grad()
        softplus = nn.functional.softplus
        (softplus(d(g(x).detach())).mean() + softplus(-d(y)).mean()).backward()
        opt_d.step()
        opt_g.zero_grad()
        softplus(-d(g(x))).mean().backward()
        opt_g.step()

    assert_quiet(train({"G": g, "D": d}, [opt_g, opt_d], 30, step))


def test_steps_a_grad_scaler_skips_are_not_wipes() -> None:
    """A GradScaler whose scale starts far too high skips step() on inf gradients for
    many iterations in a row, while the loop clears the gradients every iteration: those
    gradients were dealt with (skipped on purpose), not discarded by an accumulation bug."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        scaler.scale(mse(model(x), y) * 1e3).backward()
        scaler.step(opt)
        scaler.update()

    model = mlp()
    run = train(model, sgd(model), 40, step)
    assert 0 < run.step < 40  # the scaler did skip steps
    assert of(run, "accumulation-wiped") == []


def test_step_twice_per_backward_is_one_finding_for_the_run() -> None:
    """The condition holds every other step: the same bug, one finding (it was one
    incident per step pair)."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x, y)
        opt.step()

    model = mlp()
    run = train(model, sgd(model), 20, step)
    assert [f.step for f in of(run, "step-without-backward")] == [2]


def test_gradients_cleared_before_step_every_few_steps_is_one_finding() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        if i % 5 == 0:  # a path taken now and then clears before the update
            opt.zero_grad()
        opt.step()

    model = mlp()
    run = train(model, sgd(model), 20, step)
    assert [f.step for f in of(run, "grad-zeroed-before-step")] == [1]


# -- one loss term rebuilt from its value, beside terms that train --------------------------
def gan_step(rebuilt: bool) -> Any:
    """pytorch/examples dcgan's discriminator update: one backward per term (real, fake),
    then the generator's. ``rebuilt``: the real term is rebuilt from ``.item()`` first."""

    def step(i: int, models: Any, opts: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        g, d = models["G"], models["D"]
        opt_g, opt_d = opts
        softplus = nn.functional.softplus
        opt_d.zero_grad()
        err_real = softplus(-d(y)).mean()
        if rebuilt:
            err_real = torch.tensor(err_real.item(), requires_grad=True)
        err_real.backward()
        softplus(d(g(x).detach())).mean().backward()
        opt_d.step()
        opt_g.zero_grad()
        softplus(-d(g(x))).mean().backward()
        opt_g.step()

    return step


def gan_models() -> tuple[dict[str, nn.Module], list[torch.optim.Optimizer]]:
    torch.manual_seed(0)
    g, d = mlp(), nn.Sequential(nn.Linear(3, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    return {"G": g, "D": d}, [sgd(g), sgd(d)]


def test_a_loss_term_rebuilt_from_item_beside_terms_that_train_is_one_error() -> None:
    models, opts = gan_models()
    run = train(models, opts, 20, gan_step(rebuilt=True))
    found = of(run, "param-no-grad")
    assert len(found) == 1, found  # one per run, not one per optimizer and step
    assert (found[0].step, found[0].severity) == (1, "error")
    assert "leaf tensor" in found[0].message and "trains nothing" in found[0].message
    assert of(run, "step-without-backward") == []


def test_every_loss_term_connected_twin_is_quiet() -> None:
    models, opts = gan_models()
    assert_quiet(train(models, opts, 20, gan_step(rebuilt=False)))


# -- a generator loss rebuilt from its value beside an information loss over both models -----
def infogan_step(rebuilt: bool) -> Any:
    """PyTorch-GAN's InfoGAN loop: G's update (its loss ``rebuilt`` from ``.item()`` in the
    bug), D's, then an information loss stepped by a third optimizer over G's and D's
    parameters together, so G's ``zero_grad()`` clears what that pass left (already
    applied by the third optimizer) before G's own backward pass."""

    def step(i: int, models: Any, opts: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        g, d = models["G"], models["D"]
        opt_g, opt_d, opt_info = opts
        softplus = nn.functional.softplus
        opt_g.zero_grad()
        g_loss = softplus(-d(g(x))).mean()
        if rebuilt:
            g_loss = torch.tensor(g_loss.item(), requires_grad=True)
        g_loss.backward()
        opt_g.step()
        opt_d.zero_grad()
        (softplus(d(g(x).detach())).mean() + softplus(-d(y)).mean()).backward()
        opt_d.step()
        opt_info.zero_grad()
        mse(d(g(x)), y[:, :1]).backward()
        opt_info.step()

    return step


def infogan_models() -> tuple[dict[str, nn.Module], list[torch.optim.Optimizer]]:
    torch.manual_seed(0)
    g, d = mlp(), nn.Sequential(nn.Linear(3, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    both = [*g.parameters(), *d.parameters()]
    return {"G": g, "D": d}, [sgd(g), sgd(d), torch.optim.SGD(both, lr=0.05)]


def test_a_generator_loss_rebuilt_from_item_is_param_no_grad_not_a_clear_before_step() -> None:
    """G's clear comes before its (cut) backward pass, in its right place: the one cause is
    the loss that reaches nothing, not gradients cleared between backward and step."""
    models, opts = infogan_models()
    run = train(models, opts, 20, infogan_step(rebuilt=True))
    found = of(run, "param-no-grad")
    assert [(f.step, f.severity) for f in found] == [(1, "error")], found
    assert "leaf tensor" in found[0].message
    assert of(run, "grad-zeroed-before-step") == []
    assert of(run, "step-without-backward") == []


def test_a_generator_loss_connected_beside_an_information_loss_twin_is_quiet() -> None:
    models, opts = infogan_models()
    assert_quiet(train(models, opts, 20, infogan_step(rebuilt=False)))


def test_a_clear_between_the_last_backward_and_step_is_still_found_after_a_cut_pass() -> None:
    """A cut pass earlier in the step does not hide a clear after the last pass that did
    reach the model."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        torch.tensor(mse(model(x), y).item(), requires_grad=True).backward()
        mse(model(x), y).backward()
        opt.zero_grad()
        opt.step()

    model = mlp()
    assert first(train(model, sgd(model), 10, step), "grad-zeroed-before-step").step == 1
