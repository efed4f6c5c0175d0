"""``lr-too-large``: a learning rate far above the size of the weights it trains, under an
optimizer whose step does not scale with the gradient.

Adam and its family (AdamW, NAdam, RAdam, Adamax, SparseAdam, their fused/8-bit variants;
Lion) and RMSprop divide each gradient element by its own running magnitude, so every
weight moves by about the learning rate at each step whatever the loss's scale (Adam by
exactly the learning rate at the first step; RMSprop by ``1/√(1 − α)`` times it, 10× at its
default α = 0.99, then by about the rate). Adagrad is not judged: its divisor is the root
of the *sum* of squared gradients, so its steps shrink as ``lr/√t`` and a rate that would
be too large for Adam is its usual setting. A learning rate several times the typical size
of the weights rewrites them within a few steps, and nothing the gradient checks read shows
it: clipping hides the gradient's size, the normalisation hides it from the updates, and
once the weights are overwritten each update is again about their own size.

The size of a param group's weights is the median RMS, before the first update, of its
weight matrices (trainable tensors of two or more dimensions that are not all zero:
zero-initialised matrices, biases and norm weights have no size to compare with; a group
without such matrices is never judged). A finding when a group's learning rate — at any
collected step, or the peak its scheduler was built for (``initial_lr``, ``max_lr``), read
at the first step — is above ``FACTOR`` times that size. SGD and every optimizer whose step
is proportional to the gradient are never judged: a large SGD rate on a small net is normal.

Adadelta sizes each step itself, by the RMS of its past updates over the RMS of the
gradients; its learning rate only multiplies that step (Zeiler's method has none: 1). At a
rate ``r`` its running mean of squared updates grows by about ``ρ + (1 − ρ)·r²`` a step, so a
rate above 1 makes each update larger than the ones before and the steps grow
geometrically. Its rate is compared with that unit instead of the weights: a finding above
``FACTOR``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradwatch.checks.findings import Finding, finding
from gradwatch.checks.fmt import num, times
from gradwatch.core import checkids

FACTOR = 3.0
#: optimizers whose per-element step is about the learning rate (class names, any base)
SCALE_FREE = frozenset(
    {"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "SparseAdam", "Lion", "FusedAdam", "RMSprop"}
)
#: name parts of other libraries' Adam/Lion/RMSprop variants; D-Adaptation and Prodigy take
#: a learning-rate *multiplier* (1.0 by default) and are excluded
_LIKE = ("adam", "lion", "rmsprop")
#: optimizers whose learning rate multiplies a step they size themselves (unit: 1)
MULTIPLIER = frozenset({"Adadelta"})
_NOT = ("dadapt", "prodigy")


def scale_free(optimizer: object) -> str | None:
    """The class name of ``optimizer`` (or of the optimizer it wraps, ``.optimizer``) when its
    step is about the learning rate per element; ``None`` otherwise."""
    for _ in range(3):
        for cls in type(optimizer).__mro__:
            name = cls.__name__
            low = name.lower()
            if low.startswith(_NOT):
                return None
            if name in SCALE_FREE or any(part in low for part in _LIKE):
                return type(optimizer).__name__
        inner = getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer:
            return None
        optimizer = inner
    return None


def multiplier(optimizer: object) -> str | None:
    """The class name of ``optimizer`` when its learning rate multiplies a step it sizes
    itself (Adadelta: natural rate 1), else ``None``."""
    for cls in type(optimizer).__mro__:
        if cls.__name__ in MULTIPLIER:
            return type(optimizer).__name__
    return None


@dataclass
class Limits:
    """One optimizer's weight size per group (``None``: not judged) and its name
    (``unit``: the sizes are the optimizer's natural rate, 1, not its weights')."""

    optimizer: str
    size: list[float | None]
    matrices: list[int]
    done: bool = False
    unit: bool = False


def weight_sizes(
    params: Sequence[torch.Tensor], group_of: Sequence[int], groups: int
) -> tuple[list[float | None], list[int]]:
    """Per group: the median RMS of its non-zero trainable weight matrices (``None`` when it
    has none), and how many there are. One host transfer for all of them."""
    picked = [i for i, p in enumerate(params) if p.dim() >= 2 and p.requires_grad and p.numel()]
    if not picked:
        return [None] * groups, [0] * groups
    with torch.no_grad():
        norms = torch.stack(
            [torch.linalg.vector_norm(params[i].detach(), dtype=torch.float32) for i in picked]
        )
    rms_of: list[list[float]] = [[] for _ in range(groups)]
    for i, norm in zip(picked, norms.cpu().tolist(), strict=True):
        if math.isfinite(norm) and norm > 0:
            rms_of[group_of[i]].append(norm / math.sqrt(params[i].numel()))
    return [statistics.median_high(r) if r else None for r in rms_of], [len(r) for r in rms_of]


def planned_peak(groups: Sequence[dict[str, object]]) -> list[float]:
    """Per group: the largest learning rate its scheduler was built for (``initial_lr``,
    ``max_lr``), or 0 when none is known."""
    out = []
    for group in groups:
        best = 0.0
        for key in ("initial_lr", "max_lr"):
            value = group.get(key)
            if isinstance(value, torch.Tensor):
                value = float(value) if value.numel() == 1 and value.device.type == "cpu" else None
            if isinstance(value, int | float) and math.isfinite(value):
                best = max(best, float(value))
        out.append(best)
    return out


def over(limits: Limits, lr: Sequence[float]) -> list[int]:
    """The groups whose learning rate is above ``FACTOR`` times their weights' size."""
    return [
        g
        for g, (x, size) in enumerate(zip(lr, limits.size, strict=False))
        if size is not None and math.isfinite(x) and x > FACTOR * size
    ]


def group_details(
    g: int, groups: list[int], lr: Sequence[float], scheduler: str | None, **more: object
) -> dict[str, object]:
    """The details of an lr finding about param group ``g`` (and the other ``groups`` it
    names): its rate, what the check measured (``more``) and the scheduler."""
    return {"group": g, "groups": groups, "lr": lr[g], **more, "scheduler": scheduler}


def report(
    o: int,
    step: int,
    limits: Limits,
    lr: Sequence[float],
    groups: list[int],
    scheduler: str | None,
    planned: bool,
) -> Finding:
    """The finding for ``groups`` at ``step`` (``planned``: ``lr`` is the scheduler's peak)."""
    g = groups[0]
    size = limits.size[g]
    assert size is not None
    what = "scheduled to reach" if planned else "set to"
    by = f" by {scheduler}" if planned and scheduler else ""
    others = f" (and group(s) {', '.join(str(j) for j in groups[1:])})" if groups[1:] else ""
    if limits.unit:
        return finding(
            checkids.LR_TOO_LARGE,
            step,
            f"the learning rate of group {g}{others} is {what} {num(lr[g])}{by}, "
            f"{times(lr[g])} {limits.optimizer}'s natural rate of 1: {limits.optimizer} "
            "sizes each step by the RMS of its past updates and multiplies it by the rate, so "
            "above 1 every update is larger than the ones before and the steps grow "
            "geometrically.",
            f"set the learning rate of {limits.optimizer} to 1 or below (its default is 1.0); "
            "look for a factor applied twice or a rate meant for SGD.",
            optimizer=o,
            details=group_details(
                g,
                groups,
                lr,
                scheduler,
                ratio=lr[g],
                optimizer_class=limits.optimizer,
                scheduled_peak=planned,
            ),
        )
    return finding(
        checkids.LR_TOO_LARGE,
        step,
        f"the learning rate of group {g}{others} is {what} {num(lr[g])}{by}, "
        f"{times(lr[g] / size)} the typical size of the weights it trains (median RMS "
        f"{num(size)} over {limits.matrices[g]} weight matrices): {limits.optimizer} moves "
        "every weight by about the learning rate at each step, whatever the gradient, so "
        "training overwrites the initialisation instead of refining it.",
        "lower the learning rate: Adam-type optimizers (and RMSprop) usually train from "
        "scratch at 1e-4…1e-3 and fine-tune at 1e-5…5e-5; look for a factor applied twice or "
        "a rate meant for SGD.",
        optimizer=o,
        details=group_details(
            g,
            groups,
            lr,
            scheduler,
            weight_rms=size,
            ratio=lr[g] / size,
            optimizer_class=limits.optimizer,
            scheduled_peak=planned,
        ),
    )
