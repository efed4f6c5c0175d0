"""Tensors in no optimizer by design (:mod:`gradwatch.checks.twins`): copies of a trained
module, and a base frozen under parametrization adapters — each with the case that is
not by design."""

from __future__ import annotations

import torch
from torch import nn

from gradwatch.checks import twins


def held(*modules: nn.Module) -> set[int]:
    return {id(p) for m in modules for p in m.parameters()}


def test_same_model_needs_the_class_and_every_shape() -> None:
    assert twins.same_model(nn.Linear(3, 4), nn.Linear(3, 4))
    assert not twins.same_model(nn.Linear(3, 4), nn.Linear(4, 3))
    assert not twins.same_model(nn.Linear(3, 4), nn.Sequential(nn.Linear(3, 4)))


def test_copies_names_the_outermost_copy_and_what_it_copies() -> None:
    model = nn.ModuleDict(
        {"net": nn.Sequential(nn.Linear(3, 4)), "target": nn.Sequential(nn.Linear(3, 4))}
    )
    found = twins.copies({"agent": model}, held(model["net"]))
    assert [(c.path, c.original) for c in found] == [("agent.target", "agent.net")]
    assert not found[0].reached()
    model["target"](torch.ones(1, 3)).sum().backward()
    assert found[0].reached()


def test_copies_is_empty_when_nothing_of_that_shape_trains() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    assert twins.copies({"": model}, held(model[0])) == []


def test_a_wrapper_around_a_copy_names_the_copy() -> None:
    """An EMA holder (its own class) around a copy of the trained network."""

    class Ema(nn.Module):
        def __init__(self, net: nn.Module) -> None:
            super().__init__()
            self.module = net

    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    copy = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model = nn.ModuleDict({"net": net, "ema": Ema(copy)})
    found = twins.copies({"m": model}, held(net))
    assert [(c.path, c.original) for c in found] == [("m.ema.module", "m.net")]


def test_a_deeper_teacher_of_the_same_layers_is_one_frozen_module_not_copies() -> None:
    """Knowledge distillation (RepDistiller): the teacher is built of the student's layer
    shapes but deeper, so several of its layers would "copy" one of the student's: no copy,
    one module run frozen."""
    student = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2))
    teacher = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 2))
    model = nn.ModuleList([student, teacher])
    found = twins.copies({"": model}, held(student))
    assert [(c.path, c.original) for c in found] == [("1", None)]
    assert not found[0].reached()
    # the student watched twice, under two names (RepDistiller's module_list and
    # trainable_list): still one student, so still no copy
    models = {"module_list": model, "trainable_list": nn.ModuleList([student])}
    found = twins.copies(models, held(student))
    assert [(c.path, c.original) for c in found] == [("module_list.1", None)]


def test_adapters_only_counts_the_adapters_when_exactly_they_are_held() -> None:
    class Scale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s = nn.Parameter(torch.ones(()))

        def forward(self, w: torch.Tensor) -> torch.Tensor:
            return w * self.s

    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    for layer in model:
        nn.utils.parametrize.register_parametrization(layer, "weight", Scale())
    scales = [layer.parametrizations.weight[0].s for layer in model]
    assert twins.adapters_only(model, {id(s) for s in scales}) == 2
    assert twins.adapters_only(model, {id(scales[0])}) == 0  # one adapter left out
    assert twins.adapters_only(model, held(model)) == 0  # everything held: no frozen base
    assert twins.adapters_only(nn.Linear(3, 4), set()) == 0  # no parametrization
