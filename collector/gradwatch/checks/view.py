"""What the checks see of one optimizer step: host-side facts, and device values once they
are on the host (``None`` until then)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from gradwatch.stats.batch_checksum import Deferred

if TYPE_CHECKING:
    from gradwatch.stats.tensors import StepStats

Event = tuple[str, float, str]  # (kind, seconds since the previous step ended, detail)
MAX_EVENTS = 256  # lifecycle events kept per step


@dataclass
class Pending:
    """What happened since the previous step of this optimizer."""

    n_backward: int = 0
    events: list[Event] = field(default_factory=list)
    loss: torch.Tensor | None = None
    batch: torch.Tensor | Deferred | None = (
        None  # the batch checksum (gradwatch.stats.batch_checksum)
    )
    batch_sig: list[str] = field(default_factory=list)
    #: the checksum of each forward's inputs, apart (``batch`` is their sum): with two or
    #: more forwards one input can repeat while the others change (a GAN's real batch)
    inputs: list[torch.Tensor | Deferred] = field(default_factory=list)
    forward_time: float = 0.0
    backward_time: float = 0.0
    dropped_events: int = 0
    #: the autocast state of this step's training forwards (``"off"``, ``"cpu bfloat16"``;
    #: two or more joined by " + "), None when no forward of a watched model was seen
    autocast: str | None = None

    def add(self, event: Event, *, before_last: bool = False) -> None:
        """Record an event; past ``MAX_EVENTS`` in one step (zero_grad in an evaluation loop,
        say) they are only counted, so memory stays bounded without a step."""
        if len(self.events) >= MAX_EVENTS:
            self.dropped_events += 1
        elif before_last and self.events:
            self.events.insert(len(self.events) - 1, event)
        else:
            self.events.append(event)


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
    #: machine epsilon of each tensor's dtype (empty: float32 for all)
    eps: list[float] = field(default_factory=list)
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


def held_for_rows(old: torch.Tensor | None, now: torch.Tensor) -> torch.Tensor:
    """:func:`held_for` applied row after row of ``now`` (rows × tensors, bool), all at
    once: row ``r`` of the result is what the ``r``-th call would have returned."""
    rows = now.shape[0]
    index = torch.arange(1, rows + 1).unsqueeze(1)
    # 1-based row of the latest row up to r where the condition did not hold (0: none yet)
    reset = torch.where(now, 0, index).cummax(dim=0).values
    count = index - reset
    if old is not None and old.shape == now.shape[1:]:
        count = count + torch.where(reset == 0, old, 0)
    return count * now


@dataclass
class Window:
    """A window of collected steps of one optimizer as the row checks see it: float64
    ``(rows, tensors)`` views of the statistics, and the host facts of each row."""

    grad_norm: torch.Tensor
    nonfinite: torch.Tensor
    param_norm: torch.Tensor
    update_norm: torch.Tensor
    loss: list[float | None]
    steps: list[int]
    lr: list[list[float]]
    #: every tensor had a gradient and was trainable (the usual row)
    plain: list[bool]
    #: mean |x| of each row's floating-point inputs (None: none, or no checksum taken)
    batch_scale: list[float | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)


class WatchedOptimizer(Protocol):
    """One watched optimizer as the checks read it (implemented by
    :class:`gradwatch.hooks.optimizer.OptimizerWatch`; the checks never import the hooks)."""

    index: int
    optimizer: torch.optim.Optimizer
    params: list[torch.Tensor]
    names: list[str]
    numel: list[int]
    shapes: list[list[int]]
    group_of: list[int]
    model_keys: list[str]
    forward_order: list[int] | None
    since_clear: int
    step: int
    stats: StepStats
    pending: Pending

    @property
    def manual(self) -> object | None:
        """The driver of a loop that updates by hand, else None."""
        ...

    def learning_rates(self) -> list[float]: ...

    def stepped_by_others(self) -> set[int]:
        """Indices of its tensors that another watched optimizer also holds and has
        stepped since this one's last step (InfoGAN's information optimizer over the
        generator's and discriminator's weights)."""
        ...
