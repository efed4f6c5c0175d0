"""Loss and data checks: ``loss-shape-mismatch``, ``loss-diverging``, ``loss-plateau``,
``eval-mode-training``, and the reproducibility check ``nondeterminism-risk`` — each bug in
a real training loop, and its correct twin."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.functional import l1_loss

import gradwatch
from tests.collector.checks.common import (
    D_IN,
    D_OUT,
    HIDDEN,
    assert_quiet,
    batch,
    first,
    mlp,
    mse,
    of,
    standard,
    train,
)


def sgd(model: nn.Module, lr: float = 0.05) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr)


# -- loss-shape-mismatch ---------------------------------------------------------------------
def column_target(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch(i)
    return x, y[:, 0]  # targets of shape (N,)


def _regression_step(loss_fn: Any, squeeze: bool) -> Any:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        out = model(x)  # (N, 1)
        loss_fn(out.squeeze(-1) if squeeze else out, y).backward()
        opt.step()

    return step


LOSSES = {
    "nn.MSELoss": nn.MSELoss(),
    "F.l1_loss": lambda a, b: nn.functional.l1_loss(a, b),  # looked up at call time
}


@pytest.mark.parametrize("loss", list(LOSSES))
def test_loss_shape_mismatch_n1_against_n_is_an_error_at_step_1(loss: str) -> None:
    model = mlp(d_out=1)
    n = batch(0)[0].shape[0]
    with pytest.warns(UserWarning, match="target size"):  # torch's own warning still shows
        run = train(model, sgd(model), 5, _regression_step(LOSSES[loss], False), data=column_target)
    f = first(run, "loss-shape-mismatch")
    assert (f.step, f.severity) == (1, "error")
    assert f.details["input_shape"] == [n, 1]
    assert f.details["target_shape"] == [n]
    assert f.details["broadcast_shape"] == [n, n]
    assert len(of(run, "loss-shape-mismatch")) == 1  # stored once while it persists


@pytest.mark.parametrize("loss", list(LOSSES))
def test_loss_shape_mismatch_correct_twin_is_quiet(loss: str) -> None:
    model = mlp(d_out=1)
    run = train(model, sgd(model), 30, _regression_step(LOSSES[loss], True), data=column_target)
    assert_quiet(run)


def test_loss_shape_mismatch_loss_imported_before_watch_is_found_too() -> None:
    """``from torch.nn.functional import l1_loss`` at the top of a script binds the function
    before ``watch()`` wraps it; PyTorch's own broadcast warning still reveals the bug."""
    model = mlp(d_out=1)
    with pytest.warns(UserWarning, match="target size"):
        run = train(model, sgd(model), 5, _regression_step(l1_loss, False), data=column_target)
    f = first(run, "loss-shape-mismatch")
    assert f.step == 1
    assert f.details["target_shape"] == [batch(0)[0].shape[0]]


# -- loss-diverging --------------------------------------------------------------------------
def test_a_learning_rate_jump_is_named_at_the_step_it_happened() -> None:
    """LR x30 at step 26: the loss only returns to its starting level (3-5x its best, as
    noisy as a correct run's), so the finding is the cause itself, ``lr-jump``."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == 25:
            for group in opt.param_groups:
                group["lr"] *= 30  # a scheduler bug: warm-up factor applied twice
        standard(i, model, opt, x, y)

    model = mlp()
    run = train(model, sgd(model), 40, step)
    f = first(run, "lr-jump")
    assert (f.step, f.severity) == (26, "warning")
    assert f.details["before"] == 0.05 and f.details["after"] == pytest.approx(1.5)
    assert "from 0.05 to 1.5" in f.message
    assert of(run, "loss-diverging") == []


def test_loss_diverging_when_the_loss_grows_by_orders_of_magnitude() -> None:
    """Full-batch linear regression: stable for 20 steps, then a learning rate just past
    the stable range (|1 - lr·λ| = 1.6, under the 10x of an lr-jump) makes the loss grow
    2.6x per step."""
    torch.manual_seed(0)
    model = nn.Linear(D_IN, 1)
    x, y = batch(0)[0], batch(0)[1][:, :1]
    lam = float(torch.linalg.eigvalsh(2 * x.T @ x / len(x)).max())
    opt = torch.optim.SGD(model.parameters(), lr=0.2 / lam)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == 20:
            opt.param_groups[0]["lr"] = 2.6 / lam
        standard(i, model, opt, x, y)

    run = train(model, opt, 60, step, data=lambda i: (x, y))
    f = first(run, "loss-diverging")
    assert f.severity == "warning" and 21 < f.step <= 45, f
    assert len(of(run, "loss-diverging")) == 1  # one finding per episode
    assert "e+" not in f.message


def test_loss_diverging_correct_twin_is_quiet() -> None:
    model = mlp()
    run = train(model, sgd(model), 60)
    assert of(run, "loss-diverging") == []
    assert_quiet(run)


def test_loss_diverging_is_quiet_on_a_noisy_but_flat_small_batch_loss() -> None:
    """Batches of 8: the loss jumps by 4x from batch to batch while its trend is flat."""
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    run = train(model, opt, 60, data=lambda i: batch(i, n=8))
    assert of(run, "loss-diverging") == []
    assert_quiet(run)


def test_loss_diverging_is_quiet_on_a_loss_that_rises_with_its_data() -> None:
    """A curriculum: the targets' noise triples every 20 steps, so the loss rises in
    steps to many times its best while the model learns at its usual pace — the rise is
    the data's, not the optimisation's (the weights move by a small fraction of their
    size)."""
    w = torch.linspace(-1.0, 1.0, D_IN * D_OUT).reshape(D_IN, D_OUT)

    def harder(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(2000 + i)
        x = torch.randn(64, D_IN, generator=g)
        return x, x @ w + 0.02 * 3 ** (i // 20) * torch.randn(64, D_OUT, generator=g)

    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    run = train(model, opt, 140, data=harder)
    assert of(run, "loss-diverging") == []


def test_loss_diverging_on_a_slow_rise_whose_updates_throw_the_weights_away() -> None:
    """Mini-batch linear regression whose rate is raised past the stable range at step 100
    (4.1x, not an lr-jump; corpus case loss_bug_diverging_slowly): the loss stays 10x+
    above its best for 30 losses before it reaches 1000x its first value, and the updates
    over them add up to many times the weights' norm: that evidence makes the held rise a
    divergence."""
    torch.manual_seed(0)
    x = torch.randn(1024, 8)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(1024, 1)
    model = nn.Linear(8, 1)
    lam = float(torch.linalg.eigvalsh(2 * x.T @ x / len(x)).max())
    opt = torch.optim.SGD(model.parameters(), lr=0.5 / lam)

    def step(i: int, model: nn.Module, opt: Any, xb: torch.Tensor, yb: torch.Tensor) -> None:
        if i == 100:
            opt.param_groups[0]["lr"] = 2.05 / lam
        standard(i, model, opt, xb, yb)

    def draw(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        pick = torch.randint(0, len(x), (64,))
        return x[pick], y[pick]

    run = train(model, opt, 200, step, data=draw)
    f = first(run, "loss-diverging")
    assert f.details["recent_median"] < 1000 * f.details["first"]  # not a blow-up
    assert f.details["travelled"] >= 2 * f.details["weight_norm"]
    assert "updates threw the weights away" in f.message


# -- loss-plateau ----------------------------------------------------------------------------
def test_loss_plateau_learning_rate_zero_on_a_fixed_batch_is_info_at_step_20() -> None:
    model = mlp()
    fixed = batch(0)
    run = train(model, sgd(model, lr=0.0), 25, data=lambda i: fixed)
    f = first(run, "loss-plateau")
    assert (f.step, f.severity) == (20, "info")
    assert f.details["range"] < 1e-8


def test_loss_plateau_correct_twin_is_quiet() -> None:
    model = mlp()
    fixed = batch(0)
    run = train(model, sgd(model), 30, data=lambda i: fixed)
    assert of(run, "loss-plateau") == []
    assert_quiet(run)


# -- eval-mode-training ----------------------------------------------------------------------
def bn_dropout_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(D_IN, HIDDEN, bias=False),  # the bias before a BatchNorm is redundant
        nn.BatchNorm1d(HIDDEN),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(HIDDEN, D_OUT),
    )


def test_eval_mode_training_model_left_in_eval_is_a_warning_at_step_1() -> None:
    model = bn_dropout_net()
    model.eval()  # e.g. left over from evaluating a loaded checkpoint
    run = train(model, sgd(model), 10)
    f = first(run, "eval-mode-training")
    assert (f.step, f.severity) == (1, "warning")
    assert f.details["root_training"] is False
    assert len(of(run, "eval-mode-training")) == 1


def _validate_at_10(restore: bool) -> Any:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == 10:
            model.eval()
            with torch.no_grad():
                mse(model(batch(99)[0]), batch(99)[1])
            if restore:
                model.train()
        standard(i, model, opt, x, y)

    return step


def test_eval_mode_training_validation_without_train_afterwards() -> None:
    model = bn_dropout_net()
    run = train(model, sgd(model), 20, _validate_at_10(restore=False))
    assert first(run, "eval-mode-training").step == 11


def test_eval_mode_training_correct_twin_is_quiet() -> None:
    model = bn_dropout_net()
    assert_quiet(train(model, sgd(model), 30, _validate_at_10(restore=True)))


def gan_modes(gen_in_eval: bool, steps: int = 12) -> Any:
    """A generator and a discriminator (both with dropout) trained in turns, each by its own
    optimizer; with ``gen_in_eval`` the generator was left in eval()."""
    gen, disc = bn_dropout_net(), bn_dropout_net()
    if gen_in_eval:
        gen.eval()
    opt_g, opt_d = sgd(gen), sgd(disc)
    run = gradwatch.watch({"gen": gen, "disc": disc}, [opt_g, opt_d])
    try:
        for i in range(steps):
            x, y = batch(i)
            opt_d.zero_grad()
            mse(disc(x), y).backward()
            opt_d.step()
            opt_g.zero_grad()
            mse(gen(x), y).backward()
            opt_g.step()
    finally:
        run.close()
    return run


def test_eval_mode_training_a_model_in_eval_next_to_one_in_train_is_one_finding() -> None:
    """The other model's steps do not end the finding (a GAN's generator left in eval()
    made one incident per step)."""
    found = of(gan_modes(gen_in_eval=True), "eval-mode-training")
    assert [(f.step, f.severity) for f in found] == [(1, "warning")]


def test_eval_mode_training_two_models_in_train_are_quiet() -> None:
    assert_quiet(gan_modes(gen_in_eval=False))


def test_eval_mode_training_quiet_for_a_frozen_backbone_with_batchnorm_in_eval() -> None:
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(D_IN, HIDDEN, bias=False), nn.BatchNorm1d(HIDDEN), nn.ReLU())
    head = nn.Sequential(nn.Dropout(0.1), nn.Linear(HIDDEN, D_OUT))
    model = nn.Sequential(backbone, head)
    backbone.requires_grad_(False)
    model.train()
    backbone.eval()  # keep the pretrained BatchNorm statistics, on purpose
    opt = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
    run = train(model, opt, 30)
    assert of(run, "eval-mode-training") == []
    assert_quiet(run)


def test_eval_mode_training_a_dropout_between_trainable_layers_in_eval_still_warns() -> None:
    """The parameter-free rule: dropout after a trainable layer of the same parent is in the
    gradient's path, so its eval() mode changes the training (a warning), while the same
    kind of layer before every trainable parameter (feature extraction) does not."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.Dropout(0.5), nn.Linear(HIDDEN, D_OUT))
    model[1].eval()
    run = train(model, sgd(model), 5)
    f = first(run, "eval-mode-training")
    assert f.details["modules_in_eval"] == ["1"]


def _finetune_with_frozen_bn(dropout_eval: bool) -> Any:
    """Fine-tune: every layer trains, the model is in train(), but its BatchNorm layers are
    kept in eval() on purpose (frozen running statistics); ``dropout_eval`` also leaves the
    dropout in eval()."""
    model = bn_dropout_net()
    model.train()
    model[1].eval()
    if dropout_eval:
        model[3].eval()
    return train(model, sgd(model), 8)


def test_eval_mode_training_batchnorm_alone_in_eval_is_info_named_as_a_choice() -> None:
    run = _finetune_with_frozen_bn(dropout_eval=False)
    found = of(run, "eval-mode-training")
    assert [(f.step, f.severity) for f in found] == [(1, "info")]
    assert found[0].message == (
        "BatchNorm layer 1 is in eval mode while the model trains: its running statistics "
        "are frozen (a common fine-tuning choice)."
    )
    assert "dropout is off" not in found[0].message
    assert_quiet(run)


def test_eval_mode_training_batchnorm_and_dropout_in_eval_still_warns() -> None:
    f = first(_finetune_with_frozen_bn(dropout_eval=True), "eval-mode-training")
    assert f.severity == "warning"
    assert f.message.startswith("1 dropout layer (3) is in eval() mode while the model trains")


# -- nondeterminism-risk ---------------------------------------------------------------------
def test_nondeterminism_risk_no_seed_set_is_info_at_start() -> None:
    torch.seed()  # a random 64-bit seed, as at start-up without manual_seed
    try:
        model = nn.Sequential(nn.Linear(D_IN, D_OUT))
        run = train(model, sgd(model), 5)
    finally:
        torch.manual_seed(0)
    f = first(run, "nondeterminism-risk")
    assert (f.step, f.severity) == (0, "info")
    assert "seeds.torch_seed_user_set" in [r["field"] for r in f.details["risks"]]
    assert_quiet(run)


def test_nondeterminism_risk_seeded_cpu_run_is_quiet() -> None:
    model = mlp()  # torch.manual_seed(0) inside
    run = train(model, sgd(model), 5)
    assert of(run, "nondeterminism-risk") == []
    assert_quiet(run)
