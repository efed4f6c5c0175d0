"""Parameter coverage checks: ``param-no-grad``, ``param-not-in-optimizer``,
``frozen-param-in-optimizer``, ``param-not-updated``, ``frozen-param-changed``,
``param-mutated-outside-step`` — each bug in a real training loop, and its correct twin."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.checks import coverage
from tests.collector.checks.common import (
    D_IN,
    D_OUT,
    HIDDEN,
    assert_quiet,
    batch,
    mlp,
    mse,
    of,
    problems,
    standard,
    train,
)


class TwoBranch(nn.Module):
    """``a(x) + b(x)``; ``cut`` selects how branch ``b`` is (wrongly) cut from the loss."""

    def __init__(self, cut: str | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(D_IN, D_OUT)
        self.b = nn.Linear(D_IN, D_OUT)
        self.cut = cut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cut == "unused":
            return self.a(x)
        b = self.b(x)
        if self.cut == "detach":
            b = b.detach()
        elif self.cut == "no_grad":
            with torch.no_grad():
                b = self.b(x)
        elif self.cut == "torch.tensor":
            b = torch.tensor(b.tolist())
        return self.a(x) + b


def sgd(model: nn.Module, **kw: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=kw.pop("lr", 0.05), **kw)


# -- param-no-grad ---------------------------------------------------------------------------
@pytest.mark.parametrize("cut", ["detach", "no_grad", "torch.tensor"])
def test_param_no_grad_names_the_cut_off_tensors_at_the_third_step(cut: str) -> None:
    """Cut off: branch ``b`` runs in every training forward and never gets a gradient."""
    model = TwoBranch(cut)
    run = train(model, sgd(model), 10)
    found = of(run, "param-no-grad")
    assert len(found) == 1  # one finding lists both cut-off tensors
    assert found[0].details["tensors"] == ["b.weight", "b.bias"]
    assert (found[0].step, found[0].severity, found[0].param) == (3, "warning", "b.weight")
    assert found[0].details["steps_without_grad"] == 3
    assert "2 trainable parameters (b.weight, b.bias)" in found[0].message


def test_param_no_grad_a_branch_that_never_runs_is_unused_info_after_20_steps() -> None:
    """Branch ``b`` is never called in forward: unused, not cut off (its module never
    ran), so one info finding once it has had no gradient for UNUSED_STEPS steps."""
    model = TwoBranch("unused")
    found = of(train(model, sgd(model), 25), "param-no-grad")
    assert [(f.step, f.severity) for f in found] == [(coverage.UNUSED_STEPS, "info")]
    assert found[0].details["tensors"] == ["b.weight", "b.bias"]
    assert "module did not run" in found[0].message
    short = TwoBranch("unused")
    assert not of(train(short, sgd(short), 10), "param-no-grad")


class TopOneExperts(nn.Module):
    """Top-1 mixture of experts: each batch goes to the expert its mean input picks; an
    expert runs only for the batches routed to it (some get none for several steps)."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.experts = nn.ModuleList(nn.Linear(D_IN, D_OUT) for _ in range(n))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        k = 0 if self.calls <= 1 else (self.calls // 5) % len(self.experts)
        return self.experts[k](x)


def test_param_no_grad_is_quiet_for_experts_routed_no_tokens_for_a_while() -> None:
    """Conditional computation: an expert without batches for several steps (its module
    does not run) is not cut off; those that have trained before are not even unused."""
    model = TopOneExperts()
    assert_quiet(train(model, sgd(model), 19))


def test_param_no_grad_is_quiet_for_task_heads_used_in_turn() -> None:
    class Heads(TwoBranch):
        calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1  # head a for 4 steps, then head b for 4 steps, ...
            return self.a(x) if (self.calls // 4) % 2 == 0 else self.b(x)

    model = Heads()
    assert_quiet(train(model, sgd(model), 30))


def test_param_no_grad_every_gradient_zero_is_an_error() -> None:
    """clip_grad_value_(…, 0): every gradient exists and is exactly zero, nothing trains."""

    def clipped(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        nn.utils.clip_grad_value_(model.parameters(), clip_value=0.0)
        opt.step()

    found = of(train(model := mlp(), sgd(model), 6, clipped), "param-no-grad")
    assert [(f.step, f.severity) for f in found] == [(coverage.PERSIST_STEPS, "error")]
    assert found[0].message.startswith(
        "every gradient of optimizer 0 has been exactly zero for 3 steps; the parameters do "
        "not change"
    )


def test_param_no_grad_every_gradient_zero_under_a_saturated_hinge_is_the_losss() -> None:
    """A hinge loss every sample clears by its margin (a spectral-norm GAN's discriminator
    on a batch of 4): the loss is exactly 0 and so is its gradient, correctly. A warning
    that says why, not the error that blames a clip or a mask."""
    torch.manual_seed(0)
    model = nn.Linear(D_IN, 1)
    with torch.no_grad():
        model.weight.fill_(0.0)
        model.bias.fill_(5.0)  # every score 5: far past the margin of 1
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.0, 0.9))
    run = gradwatch.watch(model, opt)
    try:
        for _ in range(6):
            opt.zero_grad()
            torch.relu(1.0 - model(torch.randn(4, D_IN))).mean().backward()
            opt.step()
    finally:
        run.close()
    found = of(run, "param-no-grad")
    assert [(f.step, f.severity) for f in found] == [(coverage.PERSIST_STEPS, "warning")]
    assert "because the loss itself has been exactly 0" in found[0].message
    assert found[0].details["loss"] == 0.0


def test_param_no_grad_all_zero_gradients_that_come_and_go_are_said_once() -> None:
    """A learning rate that saturates the model: every gradient is exactly zero for a few
    steps, then not, then again (word2vec's clamped scores at SparseAdam lr x1000): one
    finding, not one incident per return."""

    def flicker(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        if i % 8 < 5:  # zero for 5 steps out of every 8
            nn.utils.clip_grad_value_(model.parameters(), clip_value=0.0)
        opt.step()

    found = of(train(model := mlp(), sgd(model), 40, flicker), "param-no-grad")
    assert [(f.step, f.severity) for f in found] == [(coverage.PERSIST_STEPS, "error")]


def test_param_no_grad_some_exactly_zero_gradients_are_not_the_all_zero_error() -> None:
    """Twin: a zero layer's input gradients vanish, the rest train — no error."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, D_OUT))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every ReLU unit dead: layer 0 gets zero gradients
    found = of(train(model, sgd(model), 6), "param-no-grad")
    assert all(f.severity != "error" for f in found), [f.line() for f in found]


def test_param_no_grad_an_all_zero_gradient_is_not_called_cut_off() -> None:
    """The first layer is connected, but a frozen all-zero layer after it passes nothing
    back: its gradient exists and is exactly zero, so the finding says both possibilities
    instead of claiming the layer is cut off from the loss."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, D_OUT))
    nn.init.zeros_(model[2].weight)
    model[2].weight.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    found = of(train(model, opt, 5), "param-no-grad")
    assert [f.details["tensors"] for f in found] == [["0.weight", "0.bias"]]
    assert found[0].details["zero_grad"] == ["0.weight", "0.bias"]
    assert "exactly zero" in found[0].message and "nothing flows back" in found[0].message


class DetachedBias(nn.Linear):
    """A linear layer that adds its bias detached (the bias never gets a gradient)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias.detach())


class Critic(nn.Module):
    """A Wasserstein critic ``Linear -> LeakyReLU -> [BatchNorm] -> Linear(·, 1)``;
    ``cut_bias`` adds the last bias detached (a true cut of that one tensor)."""

    def __init__(self, *, norm: bool = False, cut_bias: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.LeakyReLU(0.2))
        self.norm = nn.BatchNorm1d(HIDDEN) if norm else nn.Identity()
        self.head = DetachedBias(HIDDEN, 1) if cut_bias else nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.body(x)))


def wasserstein(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    """One critic step: ``mean D(fake) - mean D(real)`` (a constant shift of the output
    cancels, so the loss does not depend on the last bias)."""
    opt.zero_grad()
    (model(x).mean() - model(x + 2.0).mean()).backward()
    opt.step()


def relativistic(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    """One relativistic-average discriminator step: each side's logits minus the other
    side's mean logit (a constant shift of every output cancels)."""
    opt.zero_grad()
    real, fake = model(x + 2.0), model(x)
    loss = nn.functional.softplus(fake.mean() - real).mean()
    (loss + nn.functional.softplus(fake - real.mean()).mean()).backward()
    opt.step()


@pytest.mark.parametrize("norm", [False, True])
def test_param_no_grad_a_bias_under_a_difference_of_means_is_info_not_cut_off(norm: bool) -> None:
    """The critic's last bias gets an exactly zero gradient on every step while the weight
    of its module gets one: the loss is invariant to it, which is one info, never a
    warning (also behind a BatchNorm, under a relativistic loss)."""
    model = Critic(norm=norm)
    run = train(model, sgd(model), 30, relativistic if norm else wasserstein)
    found = of(run, "param-no-grad")
    # the BatchNorm shift's gradient is zero up to rounding (not exactly): nothing to say
    assert [(f.severity, f.details["tensors"]) for f in found] == [("info", ["head.bias"])]
    assert "the loss does not depend on" in found[0].message
    assert not [f for f in run.findings if f.severity != "info"], [f.line() for f in found]


def test_param_no_grad_a_bias_detached_under_a_difference_of_means_is_still_cut_off() -> None:
    """Twin: the same loss with the last bias detached: no gradient reaches it at all, so
    it is cut off (its module ran): the warning stays."""
    model = Critic(cut_bias=True)
    found = of(train(model, sgd(model), 10, wasserstein), "param-no-grad")
    assert [(f.step, f.severity, f.details["tensors"]) for f in found] == [
        (3, "warning", ["head.bias"])
    ]


def test_param_no_grad_a_dead_layer_is_not_excused_by_another_module() -> None:
    """Twin: every unit after layer 0 is dead, so both tensors of layer 0 get an exactly
    zero gradient (and so does layer 2's weight, whose inputs are all zero, beside its
    live bias): other modules training is no evidence for them: the warning stays."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, D_OUT))
    with torch.no_grad():
        model[0].bias.fill_(-100.0)
    found = of(train(model, sgd(model), 6), "param-no-grad")
    assert [f.severity for f in found] == ["warning"]
    assert found[0].details["tensors"][:2] == ["0.weight", "0.bias"]


class Branches(nn.Module):
    """``Σ branch_k(x)``; branch ``k`` is used from step ``3k`` on, detached (a cut that
    spreads across the model one tensor pair at a time)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.branches = nn.ModuleList(nn.Linear(D_IN, D_OUT) for _ in range(n))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = self.branches[0](x)
        for k, branch in enumerate(self.branches[1:], start=1):
            if self.calls >= 3 * k:
                out = out + branch(x).detach()
        return out


def test_param_no_grad_a_cascade_across_tensors_is_one_finding() -> None:
    """Tensors cut off one after another, step after step, are one episode: one finding
    at the first onset, which names the first tensors; those that join add nothing."""
    model = Branches(6)
    run = train(model, sgd(model), 30)
    found = of(run, "param-no-grad")
    assert len(found) == 1, [f.line() for f in found]
    assert found[0].step == 5  # branch 1 is cut from step 3 on: 3 steps in a row at step 5
    assert found[0].details["tensors"] == ["branches.1.weight", "branches.1.bias"]


def test_param_no_grad_a_tensor_that_trained_before_is_conditional_when_cut_later() -> None:
    """``b`` is cut for steps 1-5 (never trained: a finding at step 3), then trains; cut
    again later it has had gradients, so its misses are conditional computation (a layer
    frozen by no_grad/detach after warm-up is a common choice): no second finding."""

    class OnOff(TwoBranch):
        calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            cut = self.calls <= 5 or 15 < self.calls <= 20 or self.calls > 45
            return self.a(x) + (self.b(x).detach() if cut else self.b(x))

    model = OnOff()
    found = of(train(model, sgd(model), 50), "param-no-grad")
    assert [f.step for f in found] == [3]
    assert found[0].details["tensors"] == ["b.weight", "b.bias"]


def test_param_no_grad_is_quiet_for_a_branch_used_every_other_step() -> None:
    class Alternating(TwoBranch):
        calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return self.a(x) + (self.b(x) if self.calls % 2 else 0.0)

    model = Alternating()
    assert_quiet(train(model, sgd(model), 30))


def test_param_no_grad_correct_twin_is_quiet() -> None:
    model = TwoBranch()
    assert_quiet(train(model, sgd(model), 30))


# -- param-not-in-optimizer ------------------------------------------------------------------
def test_param_not_in_optimizer_layer_replaced_after_the_optimizer_was_built() -> None:
    model = mlp()
    opt = sgd(model)
    model[2] = nn.Linear(HIDDEN, D_OUT)  # e.g. a new head for fine-tuning
    run = train(model, opt, 5)
    found = of(run, "param-not-in-optimizer")
    assert [f.details["tensors"] for f in found] == [["2.weight", "2.bias"]]
    assert {(f.step, f.severity) for f in found} == {(0, "error")}


def test_param_not_in_optimizer_optimizer_built_for_part_of_the_model() -> None:
    model = mlp()
    opt = torch.optim.SGD(model[0].parameters(), lr=0.05)
    run = train(model, opt, 5)
    found = of(run, "param-not-in-optimizer")
    assert [f.details["tensors"] for f in found] == [["2.weight", "2.bias"]]


def test_param_not_in_optimizer_layer_replaced_during_training_is_found_later() -> None:
    """The engine re-checks coverage periodically (``COVERAGE_EVERY`` steps): a head
    swapped in after ``watch()`` is found within that period."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == 10:
            torch.manual_seed(1)
            model[2] = nn.Linear(HIDDEN, D_OUT)  # the optimizer still holds the old head
        standard(i, model, opt, x, y)

    model = mlp()
    run = train(model, sgd(model), 60, step)
    found = of(run, "param-not-in-optimizer")
    assert [f.details["tensors"] for f in found] == [["2.weight", "2.bias"]], run.findings
    assert all(11 <= f.step <= 11 + 50 for f in found)


class QNet(nn.Module):
    """DQN: an online ``net`` and a ``target_net`` of the same class, both submodules of the
    watched model; the optimizer holds ``net`` only, the target is used under no_grad and
    synced by ``load_state_dict`` every 5 steps (``blocks`` instead: a stack of identical
    blocks, all used in forward)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = mlp()
        self.target_net = mlp(1)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls % 5 == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        with torch.no_grad():
            target = self.target_net(x).max(dim=1, keepdim=True).values
        return self.net(x) - 0.5 * target


def test_param_not_in_optimizer_a_target_network_in_the_model_is_info() -> None:
    """A copy of a trained submodule that no optimizer holds and the loss does not reach
    (a target network) is in no optimizer by design: one info, no error."""
    model = QNet()
    run = train(model, sgd(model.net), 12)
    found = of(run, "param-not-in-optimizer")
    assert [(f.step, f.severity, f.details["copy_of"]) for f in found] == [(1, "info", "net")]
    assert "`target_net` (Sequential)" in found[0].message
    assert_quiet(run)


class Blocks(nn.Module):
    """Three identical blocks in a row."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList(nn.Linear(D_IN, D_IN) for _ in range(3))
        self.head = nn.Linear(D_IN, D_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


def test_param_not_in_optimizer_a_block_left_out_is_an_error_though_its_twins_train() -> None:
    """Twin: the last of three identical blocks left out of the optimizer has the class and
    shapes of the blocks that train, but the loss reaches it: a layer left out, an error
    (at the first check after a backward, step 1)."""
    model = Blocks()
    params = [p for m in (*model.blocks[:2], model.head) for p in m.parameters()]
    run = train(model, torch.optim.SGD(params, lr=0.05), 5)
    found = of(run, "param-not-in-optimizer")
    assert [(f.step, f.severity, f.details["tensors"]) for f in found] == [
        (1, "error", ["blocks.2.weight", "blocks.2.bias"])
    ]


class Adapter(nn.Module):
    """A low-rank additive update of a weight, registered as its parametrization."""

    def __init__(self, out: int, inp: int) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(2, inp) * 0.1)
        self.b = nn.Parameter(torch.zeros(out, 2))

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight + self.b @ self.a


def adapted() -> nn.Module:
    """:func:`mlp` with an :class:`Adapter` on both weights (the biases stay plain)."""
    model = mlp()
    for layer in (model[0], model[2]):
        nn.utils.parametrize.register_parametrization(layer, "weight", Adapter(*layer.weight.shape))
    return model


def adapter_params(model: nn.Module, layers: tuple[int, ...] = (0, 2)) -> list[nn.Parameter]:
    return [p for i in layers for p in model[i].parametrizations.weight[0].parameters()]


def test_param_not_in_optimizer_a_base_frozen_under_adapters_is_info() -> None:
    """LoRA as minLoRA does it: the optimizer holds exactly the adapters' tensors and the
    base keeps ``requires_grad=True``: frozen by design, one info with the advice."""
    model = adapted()
    run = train(model, torch.optim.SGD(adapter_params(model), lr=0.05), 5)
    found = of(run, "param-not-in-optimizer")
    assert [(f.step, f.severity, f.details["adapter_tensors"]) for f in found] == [(0, "info", 4)]
    assert found[0].details["tensors"] == [
        "0.bias",
        "0.parametrizations.weight.original",
        "2.bias",
        "2.parametrizations.weight.original",
    ]
    assert "requires_grad_(False)" in found[0].hint
    assert_quiet(run)


def test_param_not_in_optimizer_an_adapter_left_out_is_an_error() -> None:
    """Twin: the optimizer misses the adapter of layer 2: not exactly the adapters, so
    every tensor in no optimizer is an error, the adapter's among them."""
    model = adapted()
    run = train(model, torch.optim.SGD(adapter_params(model, (0,)), lr=0.05), 5)
    found = of(run, "param-not-in-optimizer")
    assert [(f.step, f.severity) for f in found] == [(0, "error")]
    assert "2.parametrizations.weight.0.a" in found[0].details["tensors"]


def test_param_not_in_optimizer_correct_twin_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, sgd(model), 30))


# -- frozen-param-in-optimizer ---------------------------------------------------------------
def frozen_backbone_in_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = mlp()
    opt = sgd(model)  # built over every parameter, including the frozen ones
    model[0].requires_grad_(False)
    return model, opt


def test_frozen_param_in_optimizer_never_unfrozen_is_info_then_a_warning_at_close() -> None:
    model, opt = frozen_backbone_in_optimizer()
    run = train(model, opt, 30)
    found = of(run, "frozen-param-in-optimizer")
    info = [f for f in found if f.severity == "info"]
    late = [f for f in found if f.severity == "warning"]
    assert [f.details["tensors"] for f in info] == [["0.weight", "0.bias"]]
    assert {f.step for f in info} == {1}
    assert [f.details["tensors"] for f in late] == [["0.weight", "0.bias"]]
    assert {f.step for f in late} == {30}
    assert [f for f in problems(run) if f.check != "frozen-param-in-optimizer"] == []


def test_frozen_param_in_optimizer_warning_past_the_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(coverage, "FROZEN_HORIZON", 40)
    model, opt = frozen_backbone_in_optimizer()
    run = gradwatch_run_without_close(model, opt, 60)
    late = [f for f in of(run, "frozen-param-in-optimizer") if f.severity == "warning"]
    assert [f.details["tensors"] for f in late] == [["0.weight", "0.bias"]]
    assert all(41 <= f.step <= 60 for f in late), late
    run.close()


def gradwatch_run_without_close(model: nn.Module, opt: Any, steps: int) -> Any:
    run = gradwatch.watch(model, opt)
    for i in range(steps):
        standard(i, model, opt, *batch(i))
    return run


def test_frozen_param_in_optimizer_progressive_unfreezing_stays_info() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == 10:
            model[0].requires_grad_(True)  # warm up the head, then unfreeze the backbone
        standard(i, model, opt, x, y)

    model, opt = frozen_backbone_in_optimizer()
    run = train(model, opt, 30, step)
    assert {f.severity for f in of(run, "frozen-param-in-optimizer")} == {"info"}
    assert_quiet(run)
    assert not torch.equal(model[0].weight, mlp()[0].weight)  # it did train once unfrozen


# -- param-not-updated -----------------------------------------------------------------------
def test_param_not_updated_param_group_with_lr_zero() -> None:
    model = mlp()
    opt = torch.optim.SGD(
        [{"params": model[0].parameters(), "lr": 0.0}, {"params": model[2].parameters()}],
        lr=0.05,
    )
    run = train(model, opt, 10)
    found = of(run, "param-not-updated")
    assert [f.details["tensors"] for f in found] == [["0.weight", "0.bias"]]
    assert {(f.step, f.severity) for f in found} == {(3, "warning")}
    assert found[0].details["lr"] == 0.0


def test_param_not_updated_groups_stalling_one_after_another_are_one_finding() -> None:
    """Param groups whose rate is set to 0 at different steps (a cascade across tensors)
    give one finding, at the first onset."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(D_IN, D_IN) for _ in range(4)), nn.Linear(D_IN, D_OUT))
    opt = torch.optim.SGD([{"params": m.parameters()} for m in model], lr=0.05)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if 5 <= i < 9:
            opt.param_groups[i - 5]["lr"] = 0.0  # one more group stops at each step
        standard(i, model, opt, x, y)

    run = train(model, opt, 20, step)
    found = of(run, "param-not-updated")
    assert len(found) == 1, [f.line() for f in found]
    assert found[0].step == 8
    assert found[0].details["tensors"] == ["0.weight", "0.bias"]


def normed(scale: float) -> nn.Module:
    """``Linear -> GroupNorm -> SiLU -> Linear`` with the norm's weight at ``scale``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D_IN, 16), nn.GroupNorm(4, 16), nn.SiLU(), nn.Linear(16, 3))
    with torch.no_grad():
        model[1].weight.fill_(scale)
    return model


def test_param_not_updated_updates_below_float_resolution_at_a_schedules_end() -> None:
    """Adam under OneCycleLR sized to the run: in its last steps the rate (~1e-6 of its
    peak, above the collapse level) makes updates of the norm's weight (16.0) smaller
    than its float resolution, so it stops changing for several steps — the schedule's
    end, not a stuck tensor: quiet."""
    model = normed(16.0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = 320
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x[:4], y[:4])
        sched.step()

    assert_quiet(train(model, opt, steps, step))


def test_param_not_updated_updates_that_never_move_a_bfloat16_weight_are_stuck() -> None:
    """Twin: pure bfloat16 weights under Adam at a constant rate of 1e-4: every update is
    below the weights' resolution from the first step (no fallen rate explains it; they
    never moved): the warning stays."""
    model = normed(16.0).to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x.to(torch.bfloat16), y.to(torch.bfloat16))

    found = of(train(model, opt, 10, step), "param-not-updated")
    assert [(f.step, f.severity) for f in found] == [(3, "warning")]
    assert "1.weight" in found[0].details["tensors"]


def test_param_not_updated_correct_twin_is_quiet() -> None:
    model = mlp()
    opt = torch.optim.SGD(
        [{"params": model[0].parameters(), "lr": 0.01}, {"params": model[2].parameters()}],
        lr=0.05,
    )
    assert_quiet(train(model, opt, 30))


# -- frozen-param-changed --------------------------------------------------------------------
def _freeze_at_5(set_to_none: bool) -> Any:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i == 5:
            model[0].requires_grad_(False)  # freeze the first layer mid-run
        opt.zero_grad(set_to_none=set_to_none)
        mse(model(x), y).backward()
        opt.step()

    return step


def test_frozen_param_changed_momentum_and_weight_decay_move_a_frozen_tensor() -> None:
    model = mlp()
    opt = sgd(model, momentum=0.9, weight_decay=1e-2)
    frozen_at = model[0].weight.detach().clone()
    run = train(model, opt, 10, _freeze_at_5(set_to_none=False))
    assert not torch.equal(model[0].weight, frozen_at)  # the bug is real
    found = of(run, "frozen-param-changed")
    assert [list(f.details["tensors"]) for f in found] == [["0.weight", "0.bias"]]
    assert {(f.step, f.severity) for f in found} == {(6, "warning")}


def test_frozen_param_changed_correct_twin_is_quiet() -> None:
    model = mlp()
    opt = sgd(model, momentum=0.9, weight_decay=1e-2)
    run = train(model, opt, 30, _freeze_at_5(set_to_none=True))
    assert of(run, "frozen-param-changed") == []
    assert_quiet(run)


# -- param-mutated-outside-step --------------------------------------------------------------
def _decay_by_hand(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    standard(i, model, opt, x, y)
    model[0].weight.data.mul_(0.99)  # hand-written weight decay after every step


def test_param_mutated_outside_step_in_place_data_edit() -> None:
    model = mlp()
    run = train(model, sgd(model), 30, _decay_by_hand)
    found = of(run, "param-mutated-outside-step")
    assert {f.param for f in found} == {"0.weight"}
    assert found[0].step == 10
    assert found[0].severity == "info"


def test_param_mutated_outside_step_a_single_edit_is_found_at_the_next_step() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x, y)
        if i == 18:  # after step 19
            with torch.no_grad():
                model[2].bias.fill_(0.0)

    model = mlp()
    run = train(model, sgd(model), 30, step)
    found = of(run, "param-mutated-outside-step")
    assert [(f.param, f.step) for f in found] == [("2.bias", 20)]


def test_param_mutated_outside_step_allow_list() -> None:
    model = mlp()
    run = train(model, sgd(model), 30, _decay_by_hand, allow_mutation=["0.*"])
    assert of(run, "param-mutated-outside-step") == []
    assert_quiet(run)


def test_param_mutated_outside_step_correct_twin_is_quiet() -> None:
    model = mlp()
    run = train(model, sgd(model), 30)
    assert of(run, "param-mutated-outside-step") == []
    assert_quiet(run)


def _overlapping(edit_at: int | None, info_every: int) -> gradwatch.Run:
    """Two optimizers over overlapping tensors (InfoGAN's: one over the body, one over the
    body and a head); ``edit_at``: a step after which the body is edited by hand."""
    body, head = mlp(0), nn.Linear(D_OUT, D_OUT)
    opt_body = sgd(body)
    opt_info = torch.optim.SGD([*body.parameters(), *head.parameters()], lr=0.05)
    run = gradwatch.watch({"body": body, "head": head}, [opt_body, opt_info])
    try:
        for i in range(40):
            x, y = batch(i)
            opt_body.zero_grad()
            mse(body(x), y).backward()
            opt_body.step()
            if i % info_every == 0:
                opt_info.zero_grad()
                mse(head(body(x)), y).backward()
                opt_info.step()
            if i == edit_at:
                with torch.no_grad():
                    body[0].weight.mul_(0.5)
    finally:
        run.close()
    return run


def test_param_mutated_outside_step_not_said_of_another_optimizers_step() -> None:
    # the body's tensors change between two steps of opt_body: opt_info stepped them
    assert of(_overlapping(None, 1), "param-mutated-outside-step") == []
    # an edit by hand after a step where the other optimizer did not step is still one
    found = of(_overlapping(18, 7), "param-mutated-outside-step")
    assert [(f.param, f.step) for f in found] == [("body.0.weight", 20)]


def test_findings_name_an_optimizer_by_the_scripts_variable() -> None:
    """Two optimizers (a GAN's): the variable names found once at watch() replace
    ``optimizer N`` in the findings' words."""
    g, d = mlp(0), mlp(1)
    optimizerG, optimizerD = sgd(g), sgd(d)  # noqa: N806 - the names a DCGAN script uses
    run = gradwatch.watch({"g": g, "d": d}, [optimizerG, optimizerD])
    try:
        for i in range(4):
            x, y = batch(i)
            for opt, model in ((optimizerD, d), (optimizerG, g)):
                opt.zero_grad()
                mse(model(x), y).backward()
                if opt is optimizerD:
                    nn.utils.clip_grad_value_(d.parameters(), clip_value=0.0)
                opt.step()
    finally:
        run.close()
    (f,) = [f for f in of(run, "param-no-grad") if f.severity == "error"]
    assert f.optimizer == 1
    assert f.message.startswith("every gradient of `optimizerD` has been exactly zero")
