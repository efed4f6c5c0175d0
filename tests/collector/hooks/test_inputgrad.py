"""gradwatch.hooks.inputgrad: a forward pass asks for its input's gradient when an input
requires one and reaches a tensor outside the model and its optimizers."""

from __future__ import annotations

import torch
from torch import nn

from gradwatch.hooks.inputgrad import SEARCHED, for_input


def _ids(*modules: nn.Module) -> set[int]:
    return {id(p) for m in modules for p in m.parameters()}


def test_an_ordinary_batch_is_not_for_its_input() -> None:
    model = nn.Linear(4, 2)
    assert not for_input((torch.randn(3, 4),), {}, _ids(model))


def test_a_perturbed_input_is_for_its_input() -> None:
    model = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    delta = torch.zeros(3, 4, requires_grad=True)
    assert for_input((x + delta,), {}, _ids(model))  # one node away
    assert for_input((delta,), {}, _ids(model))  # the leaf itself
    assert for_input((), {"inputs": [x, (x + delta).clamp(0, 1)]}, _ids(model))  # in a list


def test_a_generators_output_reaches_only_parameters() -> None:
    # a GAN discriminator fed G(z): the input requires a gradient, for G's parameters
    gen, disc = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 4)), nn.Linear(4, 1)
    fake = gen(torch.randn(5, 2))
    assert not for_input((fake,), {}, _ids(gen, disc))


def test_the_search_is_bounded() -> None:
    # a free leaf deeper than SEARCHED nodes is not looked for
    delta = torch.zeros(3, requires_grad=True)
    x = delta
    for _ in range(SEARCHED + 5):
        x = x * 1.0
    assert not for_input((x,), {}, set())
    assert for_input((delta * 1.0,), {}, set())
