"""One walk of a loss's autograd graph: the forward order of the parameters, and the
trainable leaves the loss reaches.

The forward order is read from the graph itself: every autograd node carries the sequence
number the forward pass gave it when it was created, so the first node that consumes a
parameter (its ``AccumulateGrad``'s parent with the smallest number) says when the forward
pass first used it. That is the order of the forward pass, also on residual nets and with
tied weights, where the distance from the loss is not (a skip connection brings an early
layer close to the loss). Needed to name the *first* layer where NaN/Inf appear.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

MAX_NODES = 200_000  # a bound on the walk for enormous graphs
_LATE = 1 << 62  # the first use of a tensor the graph did not reach


@dataclass
class Graph:
    """What one walk found. ``leaves`` are held only while the caller looks at them."""

    first_use: dict[int, int] = field(default_factory=dict)  # id(leaf) -> sequence number
    leaves: list[torch.Tensor] = field(default_factory=list)  # in forward order
    nodes: int = 0
    complete: bool = True  # False when the walk stopped at MAX_NODES

    def reaches(self, tensor: torch.Tensor) -> bool:
        """Whether the graph accumulates a gradient into ``tensor``."""
        return id(tensor) in self.first_use


def _sequence_nr(node: Any) -> int:
    number = getattr(node, "_sequence_nr", None)
    return int(number()) if callable(number) else _LATE


def walk(root: Any) -> Graph:
    """Walk the graph below ``root`` (a ``grad_fn`` node) once."""
    graph = Graph()
    found: dict[int, torch.Tensor] = {}
    stack: list[Any] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        if len(seen) >= MAX_NODES:
            graph.complete = False
            break
        seen.add(id(node))
        seq = _sequence_nr(node)
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is None:
                continue
            variable = getattr(nxt, "variable", None)
            if isinstance(variable, torch.Tensor):
                key = id(variable)
                found[key] = variable
                graph.first_use[key] = min(graph.first_use.get(key, _LATE), seq)
            elif id(nxt) not in seen:
                stack.append(nxt)
    graph.nodes = len(seen)
    graph.leaves = sorted(found.values(), key=lambda t: graph.first_use[id(t)])
    return graph


def forward_order(graph: Graph, params: Sequence[torch.Tensor]) -> list[int] | None:
    """Indices of ``params`` in forward order (tensors the graph did not reach last, in
    their own order), or ``None`` when the graph reaches none of them."""
    first = [graph.first_use.get(id(p), _LATE) for p in params]
    if all(f == _LATE for f in first):
        return None
    return sorted(range(len(params)), key=lambda i: (first[i], i))
