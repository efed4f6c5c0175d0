"""Whether a forward pass asks for the gradient of its *input*.

Adversarial training (FGSM, PGD), saliency maps and input optimisation run a forward and a
backward pass to get ``delta.grad`` or ``x.grad``: a tensor that is in no model and no
optimizer. That backward pass also fills the parameters' gradients, and the program clears
them before the training pass: a pass made for its input, not a micro-batch whose gradient
was lost (``accumulation-wiped`` counts only the others).

The evidence is read in the model's forward pre-hook, from the inputs themselves: one of
them requires a gradient and is such a free leaf, or is made from one within a few autograd
nodes (``x + delta``). Inputs that require no gradient (every ordinary batch) cost one
attribute read each; an input made by another trained model (a GAN discriminator fed the
generator's output) is searched for at most ``SEARCHED`` nodes and reaches only parameters.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import torch

#: autograd nodes searched from one input for a free leaf (``x + delta`` is one away)
SEARCHED = 32


def _tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Iterable[torch.Tensor]:
    """The tensors among the arguments and one level inside tuples, lists and dicts."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (tuple, list)):
            yield from (t for t in a if isinstance(t, torch.Tensor))
        elif isinstance(a, dict):
            yield from (t for t in a.values() if isinstance(t, torch.Tensor))


def for_input(args: tuple[Any, ...], kwargs: Mapping[str, Any], params: set[int]) -> bool:
    """Whether an input requires a gradient that goes to a tensor outside ``params`` (ids
    of the model's and its optimizers' tensors): the input itself, a leaf, or a leaf found
    within ``SEARCHED`` autograd nodes of it."""
    for t in _tensors(args, kwargs):
        if not t.requires_grad:
            continue
        node = t.grad_fn
        if node is None:
            if id(t) not in params:
                return True
            continue
        if _free_leaf(node, params):
            return True
    return False


def _free_leaf(start: Any, params: set[int]) -> bool:
    """Breadth first from ``start``: an AccumulateGrad node of a tensor not in ``params``."""
    queue, seen = deque([start]), {id(start)}
    visited = 0
    while queue and visited < SEARCHED:
        node = queue.popleft()
        visited += 1
        variable = getattr(node, "variable", None)
        if variable is not None:
            if id(variable) not in params:
                return True
            continue
        for nxt, _ in node.next_functions:
            if nxt is not None and id(nxt) not in seen:
                seen.add(id(nxt))
                queue.append(nxt)
    return False
