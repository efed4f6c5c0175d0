"""Numerics checks: ``nonfinite-loss``, ``nonfinite-grad``, ``nonfinite-param``,
``exploding-grad``, ``vanishing-grad``, ``update-ratio`` — each bug in a real training loop,
and its correct twin."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.checks import explode, numerics
from gradwatch.core import incidents
from tests.collector.checks.common import (
    D_IN,
    D_OUT,
    HIDDEN,
    Batch,
    N,
    assert_quiet,
    batch,
    first,
    mlp,
    mse,
    of,
    standard,
    train,
)

NAN, INF = float("nan"), float("inf")


def adam(model: nn.Module, lr: float = 1e-2, **kw: Any) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=lr, **kw)


def nan_input_at(k: int) -> Any:
    """A loop whose ``k``-th batch (0-based) has one NaN feature (a corrupt sample)."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == k:
            x = x.clone()
            x[0, 0] = NAN
        standard(i, model, opt, x, y)

    return step


# -- nonfinite-loss --------------------------------------------------------------------------
def test_nonfinite_loss_from_a_corrupt_sample_is_an_error_at_that_step() -> None:
    model = mlp()
    run = train(model, adam(model), 10, nan_input_at(7))
    f = first(run, "nonfinite-loss")
    assert (f.step, f.severity, f.optimizer) == (8, "error", 0)
    assert f.details["loss"] != f.details["loss"]  # NaN


def test_nonfinite_loss_from_log_of_zero() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        p = torch.sigmoid(model(x))
        if i == 4:
            p = p * 0  # e.g. probabilities underflowed: log(0) = -inf
        loss = -(torch.log(p)).mean()
        loss.backward()
        opt.step()

    model = mlp()
    run = train(model, adam(model), 6, step)
    assert first(run, "nonfinite-loss").step == 5


def test_nonfinite_loss_correct_twin_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, adam(model), 30))


# -- nonfinite-grad --------------------------------------------------------------------------
def test_nonfinite_grad_names_the_first_tensor_and_counts_per_tensor() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        if i == 5:
            model[2].weight.grad[1, 4] = NAN
            model[2].weight.grad[2, 0] = INF
            model[0].bias.grad[3] = -INF
        opt.step()

    model = mlp()
    run = train(model, adam(model), 8, step)
    f = first(run, "nonfinite-grad")
    assert (f.step, f.severity, f.param) == (6, "error", "0.bias")
    assert f.details["counts"] == {"0.bias": 1, "2.weight": 2}
    assert all(g.step > 6 for g in of(run, "nonfinite-loss"))  # the loss was finite


def test_nonfinite_grad_from_sqrt_at_zero_names_the_layer_before_it() -> None:
    class SqrtNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.body = nn.Linear(D_IN, HIDDEN)
            self.head = nn.Linear(HIDDEN, D_OUT)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.body(x)
            h = h * (h > 0)  # a hand-written ReLU: inf * 0 = NaN in backward
            return self.head(torch.sqrt(h))  # d sqrt(h) / dh = inf at h = 0

    seen: dict[str, int] = {}

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        if i == 0:
            seen.update(
                {
                    n: int((~torch.isfinite(p.grad)).sum())
                    for n, p in model.named_parameters()
                    if not torch.isfinite(p.grad).all()
                }
            )
        opt.step()

    model = SqrtNet()
    run = train(model, adam(model), 3, step)
    assert set(seen) == {"body.weight", "body.bias"}  # the bug is real
    f = first(run, "nonfinite-grad")
    assert (f.step, f.param) == (1, "body.weight")
    assert f.details["counts"] == seen


def test_nonfinite_grad_first_in_forward_order_not_optimizer_order() -> None:
    """Param groups listed head first (a common way to give the head its own lr); a NaN
    input makes every gradient NaN: the first tensor in forward order is ``0.weight``."""
    model = mlp()
    opt = torch.optim.Adam(
        [{"params": model[2].parameters(), "lr": 1e-2}, {"params": model[0].parameters()}],
        lr=1e-3,
    )
    run = train(model, opt, 5, nan_input_at(2))
    f = first(run, "nonfinite-grad")
    assert (f.step, f.param) == (3, "0.weight")
    assert set(f.details["counts"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_nonfinite_grad_first_in_forward_order_not_registration_order() -> None:
    """The head is registered before the body, but the body runs first."""

    class HeadFirst(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.head = nn.Linear(HIDDEN, D_OUT)
            self.body = nn.Linear(D_IN, HIDDEN)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.body(x)))

    model = HeadFirst()
    run = train(model, adam(model), 5, nan_input_at(2))
    f = first(run, "nonfinite-grad")
    assert (f.step, f.param) == (3, "body.weight")


def test_nonfinite_grad_correct_twin_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, adam(model), 30))


# -- nonfinite-param -------------------------------------------------------------------------
def dead_feature(i: int) -> Batch:
    """Feature 0 is always 0, so ``0.weight[:, 0]`` gets exactly-zero gradients."""
    x, y = batch(i)
    x[:, 0] = 0.0
    return x, y


def test_nonfinite_param_adam_with_eps_zero_makes_nan_from_zero_gradients() -> None:
    model = mlp()
    run = train(model, adam(model, eps=0.0), 5, data=dead_feature)
    assert torch.isnan(model[0].weight).any()  # the bug is real
    f = first(run, "nonfinite-param")
    assert (f.step, f.severity, f.param) == (1, "error", "0.weight")
    assert f.details["tensors"] == ["0.weight"]
    assert of(run, "nonfinite-grad") == [] or first(run, "nonfinite-grad").step > 1


def test_nonfinite_param_correct_twin_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, adam(model), 30, data=dead_feature))


# -- exploding-grad --------------------------------------------------------------------------
def test_exploding_grad_a_batch_on_another_scale_jumps_above_the_median() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x * 1000 if i == 20 else x, y)  # un-normalised batch

    model = mlp()
    run = train(model, adam(model), 25, step)
    found = of(run, "exploding-grad")
    assert {f.step for f in found} == {21}
    assert "0.weight" in {f.param for f in found}
    f = next(f for f in found if f.param == "0.weight")
    assert f.details["grad_norm"] > 10 * f.details["rolling_median"]


def test_exploding_grad_learning_rate_too_high_grows_every_step() -> None:
    """Full-batch linear regression with SGD at a diverging learning rate: the gradient
    grows geometrically (> 2x per step) long before the rolling median is available."""
    torch.manual_seed(0)
    model = nn.Linear(D_IN, 1)
    fixed = batch(0)
    x, y = fixed[0], fixed[1][:, :1]
    lam = float(torch.linalg.eigvalsh(2 * x.T @ x / len(x)).max())
    opt = torch.optim.SGD(model.parameters(), lr=4.0 / lam)  # |1 - lr * lam| = 3
    run = train(model, opt, 12, data=lambda i: (x, y))
    f = first(run, "exploding-grad")
    assert f.param == "weight"
    assert 6 <= f.step <= 8
    assert f.details["rolling_median"] is None


def test_exploding_grad_a_norm_that_overflows_with_finite_elements_is_found() -> None:
    """Gradients whose every element is finite but whose float32 norm overflows (a loss
    scaled by 1e25 by mistake) are no non-finite gradient, yet they are exploding: found
    at their step, not left to the NaN they make later."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        (mse(model(x), y) * (1e25 if i == 10 else 1.0)).backward()
        if i == 10:
            assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        opt.step()

    model = mlp()
    run = train(model, adam(model), 15, step)
    (f,) = of(run, "exploding-grad")
    assert f.step == 11 and f.details["reason"] == "overflow"
    assert "beyond what float32 can hold" in f.message
    assert of(run, "nonfinite-grad") == []


def _jump_30x(base: float) -> Any:
    """A loss (a REINFORCE return, say) scaled by ``base``, then 30× that from step 21 on."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        (mse(model(x), y) * base * (30.0 if i >= 20 else 1.0)).backward()
        opt.step()

    return step


def test_exploding_grad_quiet_on_a_tiny_gradient_rising_30x_that_stays_small() -> None:
    """A policy gradient rising 30× from a tiny level (0.0027 -> 0.08 in REINFORCE) stays
    far below the weights' own scale: judged from exploding-grad's floor (1% of ‖θ‖), it
    does not explode."""
    model = mlp()
    run = train(model, torch.optim.SGD(model.parameters(), lr=0.0), 30, _jump_30x(1e-3))
    assert of(run, "exploding-grad") == []
    state = run.context.checks.numerics._state[0]
    theta = math.sqrt(sum(float(p.detach().square().sum()) for p in model.parameters()))
    assert state.floor == pytest.approx(math.log(explode.EXPLODE_FACTOR * 1e-2 * theta))


def test_exploding_grad_the_same_30x_jump_large_against_the_weights_is_found() -> None:
    """Plain SGD passes the 30x jump on to the update in full: the weights move by far
    more than their usual step, by more than 1% of their norm."""
    model = mlp()
    run = train(model, torch.optim.SGD(model.parameters(), lr=0.01), 30, _jump_30x(1.0))
    assert [f.step for f in of(run, "exploding-grad")] == [21]


def test_exploding_grad_the_same_30x_jump_under_adam_moves_the_weights_as_usual() -> None:
    """Adam divides the gradient by its running RMS: after the same 30x jump the weights
    move at their usual pace, so no update was abnormally large — not an explosion."""
    model = mlp()
    run = train(model, adam(model), 30, _jump_30x(1.0))
    assert of(run, "exploding-grad") == []


def _policy_gradient(spikes: set[int]) -> Any:
    """An actor-critic-like step: a non-stationary objective (the returns weighting the
    loss drift) with rare episodes whose return is 50x the usual one."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        weight = (1.0 + 0.5 * math.sin(i / 7.0)) * (50.0 if i in spikes else 1.0)
        opt.zero_grad()
        (mse(model(x), y) * weight * 0.05).backward()
        opt.step()

    return step


def test_exploding_grad_rl_return_spikes_under_adam_are_quiet() -> None:
    """minimalRL's actor-critic/PPO: a rare 50x return spikes the gradient 30-600x its
    median, but Adam's update stays within a few times its usual (tiny) step — training
    on a noisy objective, not an explosion."""
    model = mlp()
    opt = adam(model, lr=2e-4)
    assert_quiet(train(model, opt, 150, _policy_gradient({60, 110})))


def test_exploding_grad_the_same_spikes_under_sgd_are_found() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    run = train(model, opt, 150, _policy_gradient({60, 110}))
    assert [f.step for f in of(run, "exploding-grad")][:1] == [61]


def test_exploding_grad_correct_twin_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, adam(model), 60))


def test_exploding_grad_quiet_on_a_gradual_rise_to_a_new_level() -> None:
    """A gradient growing 5% per step (like LayerNorm or first-attention gradients from a
    near-zero start) ends up far above its 100-step median — the old per-tensor rule's
    alarm (10x) — but never jumps suddenly: training, not an explosion."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        (mse(model(x), y) * 1.05**i).backward()
        opt.step()

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # the weights stay: a pure 5% rise
    run = train(model, opt, 150, step, data=lambda i: batch(0))
    assert of(run, "exploding-grad") == []
    state = run.context.checks.numerics._state[0]
    last = state.history[(state.filled - 1) % 100]
    assert bool((last > 10 * state.history.median(dim=0).values).any())  # the old alarm


def test_exploding_grad_one_finding_per_episode_even_when_it_returns() -> None:
    """A run of bad batches (steps 41-43) is one episode: one finding, not one per step
    or per tensor."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x * 1000 if 40 <= i <= 42 else x, y)

    model = mlp()
    run = train(model, adam(model), 70, step)
    (f,) = of(run, "exploding-grad")
    assert f.step == 41 and f.details["reason"] == "median"
    assert "0.weight" in f.details["tensors"]


# -- vanishing-grad --------------------------------------------------------------------------
def _scaled_down(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    (mse(model(x), y) / 1e9).backward()  # normalised by N**2 of the whole dataset
    opt.step()


def test_vanishing_grad_loss_scaled_down_by_mistake() -> None:
    """With SGD a loss divided by 1e9 leaves every gradient and every update tiny: the
    weights stand still, step after step."""
    model = mlp()
    run = train(model, torch.optim.SGD(model.parameters(), lr=0.1), 25, _scaled_down)
    (f,) = of(run, "vanishing-grad")  # the cascade over every tensor is one finding
    assert (f.step, f.severity, f.param) == (20, "warning", "0.weight")
    assert set(f.details["rms"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert all(r < numerics.STILL for r in f.details["update_ratio"].values())
    assert "in 4 tensors" in f.message and "e-" in f.message


def test_vanishing_grad_the_same_loss_under_adam_is_quiet() -> None:
    """Adam rescales the tiny gradient: the weights keep moving at a usual pace, so the
    small gradient alone is not a finding."""
    model = mlp()
    assert of(train(model, adam(model), 25, _scaled_down), "vanishing-grad") == []


def deep_sigmoid(layers: int) -> nn.Module:
    torch.manual_seed(0)
    mods: list[nn.Module] = []
    for k in range(layers):
        mods += [nn.Linear(16 if k else D_IN, 16), nn.Sigmoid()]
    return nn.Sequential(*mods, nn.Linear(16, D_OUT))


def test_vanishing_grad_first_to_last_layer_ratio_in_a_deep_sigmoid_net() -> None:
    """Six saturating layers trained by SGD: the first layer's gradient is > 1e-7 per
    element but < 1e-3 of the last layer's, and its weights stand still (the catalogue's second
    condition)."""
    model = deep_sigmoid(6)
    x, y = batch(0)
    mse(model(x), y).backward()
    first_w, last_w = model[0].weight.grad, model[12].weight.grad
    assert first_w.abs().mean() > 1e-7 and first_w.norm() < 1e-3 * last_w.norm()
    model.zero_grad()
    run = train(model, torch.optim.SGD(model.parameters(), lr=0.1), 30)
    found = of(run, "vanishing-grad")
    assert "0.weight" in {f.param for f in found}, run.findings
    assert min(f.step for f in found if f.param == "0.weight") == numerics.VANISH_STEPS


def test_vanishing_grad_deep_sigmoid_net_under_adam_is_quiet() -> None:
    """The same net under Adam: each weight moves by about the learning rate whatever its
    gradient's size, the first layer as fast as the last — its weights train."""
    model = deep_sigmoid(6)
    assert of(train(model, adam(model, lr=1e-3), 30), "vanishing-grad") == []


def test_vanishing_grad_correct_twin_is_quiet() -> None:
    model = deep_sigmoid(2)
    assert_quiet(train(model, adam(model), 30))


def test_vanishing_grad_gan_generator_with_tiny_first_gradients_is_quiet() -> None:
    """PyTorch-GAN: the generator's first gradients are ~1e-9 per element (its
    discriminator has not learnt anything yet) but Adam moves it by learning-rate-sized
    steps; later they grow. Neither the tiny start nor the update is a vanishing gradient."""
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, D_IN))
    disc = nn.Sequential(nn.Linear(D_IN, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    run = gradwatch.watch({"gen": gen, "disc": disc}, [opt_g, opt_d])
    bce = nn.BCEWithLogitsLoss()
    for i in range(60):
        real = batch(i)[0]
        fake = gen(torch.randn(N, 4))
        scale = 1e-8 * 10 ** min(i / 10, 7)  # the generator's signal grows from ~1e-8
        opt_g.zero_grad()
        (bce(disc(fake), torch.ones(N, 1)) * scale).backward()
        opt_g.step()
        opt_d.zero_grad()
        d = bce(disc(real), torch.ones(N, 1)) + bce(disc(fake.detach()), torch.zeros(N, 1))
        d.backward()
        opt_d.step()
    run.close()
    assert of(run, "vanishing-grad") == []


class _Experts(nn.Module):
    """A mixture of experts with a learnt top-1 gate over 4 experts, one preferred."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.gate = nn.Linear(D_IN, 4)
        with torch.no_grad():
            self.gate.bias.copy_(torch.tensor([6.0, -2.0, -2.0, -2.0]))
        self.experts = nn.ModuleList(nn.Linear(D_IN, D_OUT) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.gate(x), dim=1)  # dense: idle experts get tiny weights
        return sum(weights[:, k : k + 1] * e(x) for k, e in enumerate(self.experts))


def test_vanishing_grad_idle_experts_of_a_mixture_are_quiet() -> None:
    """davidmrau/mixture-of-experts: experts the gate hardly routes to get gradients of
    ~1e-8 per element, now and then a real one; Adam keeps moving them. Conditional
    computation, not a vanishing gradient."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        (mse(model(x), y) * 5e-4).backward()  # an auxiliary loss's weight: every gradient small
        opt.step()

    model = _Experts()
    run = train(model, adam(model, lr=1e-3), 60, step)
    assert of(run, "vanishing-grad") == []


def test_vanishing_grad_a_memorised_batch_is_quiet() -> None:
    """Overfitting one batch (a usual sanity check): the loss falls to almost nothing
    and every gradient with it, below the absolute RMS threshold. That is a fit, not a
    vanishing gradient; the loss scaled down by mistake above (tiny from the first step)
    is still found."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, 64), nn.Tanh(), nn.Linear(64, 10))
    x, y = torch.randn(16, D_IN), torch.randn(16, 10)
    losses: list[float] = []

    def step(i: int, model: nn.Module, opt: Any, _x: torch.Tensor, _y: torch.Tensor) -> None:
        opt.zero_grad()
        loss = mse(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    run = train(model, adam(model), 350, step)
    rms = max(float(p.grad.norm()) / p.numel() ** 0.5 for p in model.parameters())
    assert losses[-1] < 1e-3 * losses[0] and rms < 1e-7, (losses[-1], rms)  # the case at hand
    assert_quiet(run)


# -- update-ratio ----------------------------------------------------------------------------
def test_update_ratio_a_small_learning_rate_is_not_a_finding() -> None:
    """Small updates are what fine-tuning, deep nets and decayed schedules look like when
    correct (the old 'too small' warning fired on them); lr-collapse covers a schedule
    that collapses, param-not-updated a tensor that does not move."""
    for lr in (1e-6, 1e-10):
        model = mlp()
        run = train(model, adam(model, lr=lr), 30)
        assert of(run, "update-ratio") == []


def test_update_ratio_updates_larger_than_the_weights_are_one_error_at_step_3() -> None:
    model = mlp()
    run = train(model, torch.optim.SGD(model.parameters(), lr=30.0), 12)
    (f,) = [f for f in of(run, "update-ratio") if f.severity == "error"]
    assert (f.step, f.param) == (3, "0.weight")
    assert set(f.details["tensors"]) == {"0.weight", "2.weight"}  # matrices only, one finding
    assert f.details["ratio"] > 10


def test_update_ratio_from_the_first_update_names_the_learning_rate_as_the_cause() -> None:
    """Updates 10x the weights from the optimizer's very first step: no gradient grew during
    training to make them so, the learning rate did. The finding says so, and the incident
    grouping reads it under lr-too-large's rule (SGD included, which lr-too-large itself
    never judges), so what follows from it (gradients exploding once the weights are
    rewritten) is its consequence, not a cause named first."""
    model = mlp()
    run = train(model, torch.optim.SGD(model.parameters(), lr=30.0), 12)
    (f,) = [f for f in of(run, "update-ratio") if f.severity == "error"]
    assert f.details["from_start"] is True
    assert f.message.startswith("the learning rate (30) is far too large for these weights")
    assert incidents.kind_of(f.to_meta()) == "lr-too-large"
    # as every reader groups them (the CLI, the run's summary, the server): in step order
    (view, *later) = incidents.views([x.to_meta() for x in run.findings if x.severity != "info"])
    assert view.cause["check"] == "update-ratio", [v.id for v in (view, *later)]
    assert "exploding-grad" in {c["check"] for c in view.consequences}


def test_update_ratio_a_streak_that_begins_later_is_not_read_as_the_learning_rate() -> None:
    """The same updates, but only after five healthy steps (the rate raised by hand at
    step 6): the gradients or the rate changed during training, so the finding does not
    claim the rate was too large from the start."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == 5:
            opt.param_groups[0]["lr"] = 30.0
        opt.zero_grad()
        mse(model(x), y).backward()
        opt.step()

    run = train(model, opt, 14, step)
    (f,) = [f for f in of(run, "update-ratio") if f.severity == "error"]
    assert f.details["from_start"] is False and f.message.startswith("for 3 steps")


def test_update_ratio_first_step_divides_by_the_weights_before_the_update() -> None:
    """A step-1 update 1000x the initial weights read as ratio ~1 when divided by the
    weights after it; against the weights before it, it is ~1000."""
    model = nn.Linear(D_IN, D_OUT, bias=False)
    with torch.no_grad():
        model.weight.mul_(1e-4)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    run = train(model, opt, 1)
    state = run.context.checks.numerics._state[0]
    # step 1 counts as out of range (> 10x) for the error level: one step of its streak
    assert state.streaks["error"].tolist() == [1]
    assert run.context.checks.numerics.initial == {}  # consumed by the first row


def test_update_ratio_correct_twin_is_quiet() -> None:
    model = mlp()
    run = train(model, adam(model), 60)
    assert of(run, "update-ratio") == []
    assert_quiet(run)
