"""The forward order of parameters, read once from the autograd graph of a loss.

A parameter's ``AccumulateGrad`` node sits farther from the loss the earlier the parameter
is used in the forward pass, so sorting by breadth-first distance from the loss (farthest
first) gives the forward order. Needed to name the *first* layer where NaN/Inf appear,
which is not the optimizer's or the module registration order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

MAX_NODES = 200_000  # a bound on the walk for enormous graphs


def forward_order(grad_fn: Any, params: Sequence[torch.Tensor]) -> list[int] | None:
    """Indices of ``params`` in forward order, or ``None`` when the graph reaches none."""
    index = {id(p): i for i, p in enumerate(params)}
    depth: dict[int, int] = {}
    queue: deque[tuple[Any, int]] = deque([(grad_fn, 0)])
    seen: set[int] = set()
    while queue and len(seen) < MAX_NODES:
        node, d = queue.popleft()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) in index:
            depth.setdefault(index[id(variable)], d)
        for nxt, _ in getattr(node, "next_functions", ()):
            queue.append((nxt, d + 1))
    if not depth:
        return None
    unseen = max(depth.values()) + 1  # tensors the graph did not reach go first
    return sorted(range(len(params)), key=lambda i: (-depth.get(i, unseen), i))
