"""Connectivity read from the loss's autograd graph (gradwatch.hooks.connectivity): a loss cut
from the model is ``param-no-grad`` (never ``step-without-backward``), trainable tensors
no watched module and no optimizer holds are ``param-not-in-optimizer``; and the forward
order comes from the forward pass, not the distance from the loss."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.hooks.forward_order import forward_order, walk
from tests.collector.checks.common import (
    D_IN,
    D_OUT,
    HIDDEN,
    assert_quiet,
    first,
    mlp,
    mse,
    of,
    train,
)


def sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05)


# -- the loss cut from the model ---------------------------------------------------------------
def _cut(how: str) -> Any:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        out = model(x)
        if how == "item":  # the loss rebuilt from .item(), then made to "require grad"
            loss = torch.tensor(mse(out, y).item(), requires_grad=True)
        elif how == "tensor over outputs":
            loss = torch.tensor(out.detach().flatten()[:8].tolist(), requires_grad=True).mean()
        else:  # .detach() on the way, then requires_grad set to silence torch's error
            loss = mse(out.detach(), y)
            loss.requires_grad = True
        loss.backward()
        opt.step()

    return step


@pytest.mark.parametrize("how", ["item", "tensor over outputs", "detach"])
def test_a_loss_cut_from_the_model_is_param_no_grad_not_step_without_backward(how: str) -> None:
    model = mlp()
    run = train(model, sgd(model), 6, _cut(how))
    f = first(run, "param-no-grad")
    assert (f.step, f.severity, f.param) == (1, "error", None)
    assert "not connected to the model" in f.message
    where = f.details["where"]
    assert ("leaf tensor" in where) if how != "tensor over outputs" else ("float32[8]" in where)
    assert of(run, "step-without-backward") == []
    assert len(of(run, "param-no-grad")) == 1  # one finding for the whole episode


def test_a_cut_loss_between_steps_of_a_connected_one_is_one_finding() -> None:
    """Every fifth step another loss reaches the model (a WGAN generator's through its
    critic): the cut stays one finding, not one per return."""
    cut = _cut("item")

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if i % 5 == 4:
            mse(model(x), y).backward()  # reaches the model before the cut step
        cut(i, model, opt, x, y)

    model = mlp()
    run = train(model, sgd(model), 20, step)
    assert len(of(run, "param-no-grad")) == 1


def test_a_real_loss_is_quiet() -> None:
    model = mlp()
    assert_quiet(train(model, sgd(model), 30))


# -- parameters no module and no optimizer holds -------------------------------------------
class PlainList(nn.Module):
    """The bug: hidden layers in a Python list, invisible to parameters()."""

    def __init__(self, registered: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        layers = [nn.Linear(D_IN, HIDDEN), nn.Linear(HIDDEN, HIDDEN)]
        self.layers = nn.ModuleList(layers) if registered else layers
        self.head = nn.Linear(HIDDEN, D_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def test_layers_in_a_plain_list_are_found_with_their_shapes_and_container() -> None:
    model = PlainList(registered=False)
    run = train(model, sgd(model), 10)
    (f,) = of(run, "param-not-in-optimizer")
    assert (f.step, f.severity) == (1, "error")
    assert f.details["held_by"] == "Linear in the plain list `layers`"
    assert f.details["shapes"] == [[HIDDEN, D_IN], [HIDDEN], [HIDDEN, HIDDEN], [HIDDEN]]


def test_layers_in_a_module_list_are_quiet() -> None:
    model = PlainList(registered=True)
    assert_quiet(train(model, sgd(model), 30))


def test_a_parameter_made_in_forward_is_found() -> None:
    class FreshScale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scale = nn.Parameter(torch.ones(D_OUT))  # re-created, so never trained
            return self.body(x) * scale

    model = FreshScale()
    run = train(model, sgd(model), 5)
    f = first(run, "param-not-in-optimizer")
    assert f.details == {
        "shapes": [[D_OUT]],
        "dtypes": ["float32"],
        "held_by": "no module holds them: made in forward()?",
    }


def test_an_optimizer_over_the_ema_copy_is_said_to_hold_a_second_copy() -> None:
    """The optimizer holds the parameters of an EMA copy (watched), the loss reaches the
    model trained in forward(): its tensors belong to a live module, not to forward()."""
    model = mlp()
    ema = copy.deepcopy(model)
    opt = torch.optim.SGD(ema.parameters(), lr=0.05)

    def step(i: int, _: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        opt.step()

    run = train(ema, opt, 3, step)
    f = first(run, "param-not-in-optimizer")
    # the copy is named as the nearest frame names it (``train``'s ``model`` here; ``ema``
    # in a script: tests/collector/corpus/cases/coverage_bug_optimizer_over_ema_copy.py)
    assert "the optimizer's 4 tensors belong to a second copy of the model (`" in f.message
    assert "not the one trained in forward()): an optimizer built over an EMA" in f.message
    assert "the parameters of `model` (Sequential)" in f.message
    assert "made in forward()" not in f.message
    cut = first(run, "param-no-grad")
    assert "a second copy of the model" in cut.message


def test_a_model_trained_by_an_optimizer_of_its_own_is_not_reported() -> None:
    """Only G is watched; D (reached by the generator's loss) has its own optimizer."""
    torch.manual_seed(0)
    g, d = mlp(), nn.Sequential(nn.Linear(D_OUT, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_g, opt_d = sgd(g), sgd(d)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt_d.zero_grad()
        (d(y).mean() - d(g(x).detach()).mean()).backward()
        opt_d.step()
        opt.zero_grad()
        d(g(x)).mean().backward()
        opt.step()

    assert_quiet(train(g, opt_g, 30, step))


# -- cost: one walk per graph shape ---------------------------------------------------------
def test_the_graph_is_walked_once_per_shape_not_per_step() -> None:
    model = mlp()
    run = train(model, sgd(model), 40)
    assert len(run._graph._shapes) == 1


# -- forward order -------------------------------------------------------------------------
class Residual(nn.Module):
    """A skip connection carries the first layer's output straight to the loss, so by
    distance from the loss it looks like the *last* layer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Linear(HIDDEN, D_OUT)  # registered first, used last
        self.stem = nn.Linear(D_IN, HIDDEN)
        self.blocks = nn.Sequential(*(nn.Linear(HIDDEN, HIDDEN) for _ in range(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        return self.head(h + self.blocks(h))


def test_forward_order_on_a_residual_net_follows_the_forward_pass() -> None:
    model = Residual()
    run = train(model, sgd(model), 3)
    w = run.context.watches[0]
    assert w.forward_order is not None
    names = [w.names[i] for i in w.forward_order]
    expected = ["stem.weight", "stem.bias"]
    expected += [f"blocks.{k}.{p}" for k in range(4) for p in ("weight", "bias")]
    assert names == [*expected, "head.weight", "head.bias"]


def test_forward_order_with_a_tied_embedding_starts_at_the_embedding() -> None:
    """nanoGPT's layout: the token embedding is also the output head (tied), so it sits
    next to the loss; the forward pass still uses it first."""

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.wte, self.wpe = nn.Embedding(11, 8), nn.Embedding(5, 8)
            self.h = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8))
            self.head = nn.Linear(8, 11, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            return self.head(x + self.h(x))

    model = Tied()
    idx = torch.randint(0, 11, (2, 5))
    loss = nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
    params = list(model.parameters())
    order = forward_order(walk(loss.grad_fn), params)
    assert order is not None
    named = dict(model.named_parameters())
    by_id = {id(p): n for n, p in named.items()}
    assert [by_id[id(params[i])] for i in order] == [
        "wte.weight",
        "wpe.weight",
        "h.0.weight",
        "h.0.bias",
        "h.1.weight",
        "h.1.bias",
    ]


def test_watch_without_graph_keeps_no_order() -> None:
    model = mlp()
    run = gradwatch.watch(model, sgd(model))
    run.close()
    assert run.context.watches[0].forward_order is None
