"""The per-optimizer histories of the numerics checks (one :class:`State` per optimizer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from gradwatch.checks.view import StepView

WINDOW = 100  # steps of gradient-norm history for the rolling medians


class FirstUpdate(NamedTuple):
    """An optimizer's first update, at its largest against the weights it changed."""

    ratio: float  # ‖Δθ‖/‖θ before‖ of the weight matrix
    name: str  # that matrix
    multiplier: float | None  # ‖Δθ‖/‖g‖: the step's multiplier (None: no gradient measured)
    lr: float  # the learning rate of its param group at that step


@dataclass
class State:
    """Per-optimizer history of the numerics checks."""

    sqrt_numel: torch.Tensor
    sqrt_total: float  # √(elements of every tensor): the RMS of the whole gradient
    matrix: torch.Tensor  # tensors with ≥ 2 dimensions (weight matrices, kernels)
    history: torch.Tensor  # WINDOW × tensors: gradient norms (per-tensor medians, when reporting)
    totals: torch.Tensor  # WINDOW: log of the whole gradient norm
    #: WINDOW: the whole update ‖Δθ‖/‖θ‖ of the same steps (NaN: not measured)
    moves: torch.Tensor = field(default_factory=lambda: torch.full((WINDOW,), float("nan")))
    filled: int = 0
    refreshed: bool = False  # the rolling median of ``totals`` has been taken
    center: float = 0.0  # median of ``totals``
    scale: float = 0.0  # its median absolute deviation, scaled to a standard deviation
    last: float | None = None  # the previous finite whole-gradient norm
    growth: int = 0  # consecutive steps at which the whole norm more than doubled
    exploding: str | None = None  # the tensor named by the open exploding-grad episode
    calm: int = 0  # steps of an open episode back at the usual level
    vanish: torch.Tensor | None = None
    vanishing: str | None = None  # the tensor named by the open vanishing-grad episode
    vanish_calm: int = 0
    first_loss: float | None = None  # |loss| of the first row with a finite one
    streaks: dict[str, torch.Tensor] = field(default_factory=dict)
    #: open update-ratio episodes: level -> (tensor named, steps since any was out of range)
    ratio_open: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: rows the update-ratio check has measured (a streak as long as this began at the
    #: optimizer's first update)
    ratio_rows: int = 0
    #: the optimizer's first update at its largest against the weights before it (None:
    #: not measured; :class:`FirstUpdate`)
    first_update: FirstUpdate | None = None
    previous_param_norm: torch.Tensor | None = None
    #: log of the smallest whole gradient norm that can explode (exploding-grad's floor,
    #: from ‖θ‖ before the first update; -inf when not measured); None: not read yet
    floor: float | None = None
    ends: tuple[int, int] | None = None  # first and last weight matrix in forward order

    @classmethod
    def of(cls, v: StepView) -> State:
        numel = torch.tensor(v.numel, dtype=torch.float64).clamp(min=1)
        return cls(
            sqrt_numel=numel.sqrt(),
            sqrt_total=float(numel.sum().sqrt()),
            matrix=torch.tensor([len(s) >= 2 for s in v.shapes] or [False] * len(v.names)),
            history=torch.zeros(WINDOW, len(v.names), dtype=torch.float64),
            totals=torch.zeros(WINDOW, dtype=torch.float64),
        )


def ends(state: State, order: list[int]) -> tuple[int, int]:
    """The first and last weight matrix in forward order (``(-1, -1)``: fewer than two)."""
    if state.ends is None:
        weights = [i for i in order if bool(state.matrix[i])]
        state.ends = (weights[0], weights[-1]) if len(weights) >= 2 else (-1, -1)
    return state.ends
