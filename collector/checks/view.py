"""What the checks see of one optimizer step: host-side facts, and device values once they
are on the host (``None`` until then)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

Event = tuple[str, float, str]


@dataclass
class StepView:
    """One optimizer step as the checks see it. Tensors are float64 on the CPU."""

    optimizer: int
    step: int  # 1-based index of the step being taken
    names: list[str]
    numel: list[int]
    requires_grad: list[bool]
    has_grad: list[bool]
    n_backward: int  # backward passes since the previous step
    since_clear: int  # backward passes since gradients were last cleared
    events: list[Event]
    lr: list[float]
    group_of: list[int]
    shapes: list[list[int]] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # tensor indices in forward order
    has_closure: bool = False
    loss: float | None = None
    grad_norm: torch.Tensor | None = None
    nonfinite: torch.Tensor | None = None
    param_norm: torch.Tensor | None = None
    update_norm: torch.Tensor | None = None

    @functools.cached_property
    def has_grad_t(self) -> torch.Tensor:
        """``has_grad`` as a bool tensor (built once per step)."""
        return torch.tensor(self.has_grad, dtype=torch.bool)

    @functools.cached_property
    def trainable_t(self) -> torch.Tensor:
        """``requires_grad`` as a bool tensor (built once per step)."""
        return torch.tensor(self.requires_grad, dtype=torch.bool)

    @property
    def has_values(self) -> bool:
        """Whether the pre-step device values (gradient norms, counts) are on the host."""
        return self.grad_norm is not None and self.nonfinite is not None


def held_for(old: torch.Tensor | None, now: torch.Tensor) -> torch.Tensor:
    """Consecutive steps each tensor's condition has held: ``old + 1`` where ``now``, else 0."""
    return now.long() if old is None or old.shape != now.shape else (old + 1) * now
