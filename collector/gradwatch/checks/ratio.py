"""``update-ratio``: ‖Δθ‖ / ‖θ before the update‖ of weight matrices far too large.

Only the *too large* direction is a finding: an update as large as the parameter itself,
step after step, rewrites the weights instead of training them (a learning rate far too
high). Small ratios are left alone — they are what fine-tuning, deep networks, decayed
learning rates and embeddings (whose rows move only when their tokens appear, so the
whole-matrix ratio understates the touched rows') look like when they are correct; a
collapsed learning rate is ``lr-collapse``'s and a stuck tensor ``param-not-updated``'s.
The whole-matrix ratio is a lower bound of any subset of rows', so a row-sparse update
can only make this check quieter, never louder.

The first step divides by the norm measured before the first update (``initial``).
One finding per level and episode lists every matrix out of range at its onset; the
episode ends after ``CALM_STEPS`` steps with none out of range.
"""

from __future__ import annotations

import math

import torch

from gradwatch.checks.findings import Finding, FindingSink, finding
from gradwatch.checks.fmt import num, times
from gradwatch.checks.numstate import FirstUpdate, State
from gradwatch.checks.view import held_for
from gradwatch.core import checkids
from gradwatch.core.contract import Severity

#: update-ratio levels: name, ratio above which a step counts, steps to hold, severity
LEVELS: list[tuple[str, float, int, Severity]] = [
    ("warn", 1.0, 20, "warning"),
    ("error", 10.0, 3, "error"),
]
CALM_STEPS = 20
LISTED = 4


def ratios(update: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
    """‖Δθ‖ / ‖θ_before‖ (rows × tensors, or one row)."""
    return update / before


def largest(
    state: State,
    ratio: torch.Tensor,
    before: torch.Tensor,
    update: torch.Tensor,
    grad: torch.Tensor | None,
    facts: tuple[list[str], list[int], list[float]],
) -> FirstUpdate | None:
    """The weight matrix with a size whose update was largest against it in one row
    (``facts``: names, param group of each tensor, the groups' rates); None: no such
    matrix."""
    ok = state.matrix & (before > 0) & torch.isfinite(ratio)
    if not bool(ok.any()):
        return None
    masked = torch.where(ok, ratio, torch.full_like(ratio, -1.0))
    i = int(masked.argmax())
    names, group_of, lr = facts
    g = None if grad is None or i >= len(grad) else float(grad[i])
    multiplier = float(update[i]) / g if g is not None and 0 < g < math.inf else None
    name = names[i] if i < len(names) else f"tensor {i}"
    return FirstUpdate(float(masked[i]), name, multiplier, lr[group_of[i]])


def busy(state: State, ratio: torch.Tensor, before: torch.Tensor) -> bool:
    """Whether some level has a streak or an open episode, or some matrix is above the
    lowest level (rows × tensors): the rows then need :func:`row`, one by one."""
    if state.streaks or state.ratio_open:
        return True
    return bool((state.matrix & (before > 0) & (ratio > LEVELS[0][1])).any())


def row(
    sink: FindingSink,
    state: State,
    where: tuple[int, int],
    ratio: torch.Tensor,
    before: torch.Tensor,
    facts: tuple[list[str], list[int], list[float], torch.Tensor | None],
    seen: int = 0,
) -> None:
    """One step (``where``: optimizer, step) of the reference path; ``seen``: the rows this
    optimizer has had measured, this one included (0: not known)."""
    o = where[0]
    names, group_of, lr, has_grad = facts
    ok = state.matrix & (before > 0)
    if has_grad is not None:
        ok = ok & has_grad
    for key, high, steps, severity in LEVELS:
        streak = held_for(state.streaks.get(key), ok & (ratio > high))
        if bool(streak.any()):
            state.streaks[key] = streak
        else:
            state.streaks.pop(key, None)
        held = torch.nonzero(streak >= steps).flatten().tolist()
        opened = state.ratio_open.get(key)
        if held and opened is None:
            held_names = [names[i] for i in held]
            start = seen > 0 and int(streak[held[0]]) >= seen
            sink.report(
                _finding(where, held_names, ratio, held, streak, lr, group_of, severity, start)
            )
            state.ratio_open[key] = (held_names[0], 0)
        elif opened is not None:
            calm = 0 if bool(streak.any()) else opened[1] + 1
            state.ratio_open[key] = (opened[0], calm)
            if calm >= CALM_STEPS:
                del state.ratio_open[key]
                sink.clear(checkids.UPDATE_RATIO, opened[0], o)


def _finding(
    where: tuple[int, int],
    held_names: list[str],
    ratio: torch.Tensor,
    held: list[int],
    streak: torch.Tensor,
    lr: list[float],
    group_of: list[int],
    severity: Severity,
    from_start: bool = False,
) -> Finding:
    """The finding of an episode's onset. ``from_start``: the streak began at the
    optimizer's first update, so no gradient that grew during training made the updates
    this large: the step the learning rate sets is too large for these weights (the
    incident's cause, ``lr-too-large``'s rule, whatever the optimizer)."""
    o, step = where
    i = held[0]
    pairs = list(zip(held_names, held, strict=True))
    listed = ", ".join(
        f"{n} ({times(float(ratio[j]))}{' its size' if k == 0 else ''})"
        for k, (n, j) in enumerate(pairs[:LISTED])
    )
    more = f" and {len(held) - LISTED} more" if len(held) > LISTED else ""
    rate = lr[group_of[i]]
    if from_start:
        message = (
            f"the learning rate ({num(rate)}) is far too large for these weights: from the "
            f"first update on, each update has been larger than the weights it changes: "
            f"{listed}{more}; healthy updates are a small fraction of the weights."
        )
    else:
        message = (
            f"for {int(streak[i])} steps each update has been larger than the weights it "
            f"changes: {listed}{more}; healthy updates are a small fraction of the weights."
        )
    return finding(
        checkids.UPDATE_RATIO,
        step,
        message,
        "lower the learning rate or add warm-up; check the scale of the loss.",
        severity=severity,
        param=held_names[0],
        optimizer=o,
        details={
            "ratio": float(ratio[i]),
            "lr": rate,
            "tensors": {n: float(ratio[j]) for n, j in pairs},
            "from_start": from_start,
        },
    )
