"""One optimizer step's structure: its lifecycle and which tensors received a gradient.

The lifecycle is the order of the step's events as the collector recorded them (the
events since the previous ``step()``), with repeats run together: ``zero_grad backward×4``
is four micro-batches after one clearing. Events that say what gradwatch itself did
(``skipped`` by a policy) are left out; the learning rate is left out too (schedules change
it by design).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: events that describe gradwatch's own action, not the training loop's structure
OWN_EVENTS = frozenset({"skipped"})


@dataclass(frozen=True)
class StepShape:
    """The structure of one optimizer step."""

    step: int
    lifecycle: str
    has_grad: tuple[bool, ...]


def lifecycle(events: Iterable[Sequence[object]]) -> str:
    """``"zero_grad backward×4"``: the kinds of ``events`` in order, repeats counted."""
    runs: list[list[object]] = []
    for event in events:
        kind = str(event[0])
        if kind in OWN_EVENTS:
            continue
        if runs and runs[-1][0] == kind:
            runs[-1][1] = int(str(runs[-1][1])) + 1
        else:
            runs.append([kind, 1])
    words = [str(k) if n == 1 else f"{k}×{n}" for k, n in runs]
    return " ".join(words) if words else "(nothing)"


def shape(step: int, events: Iterable[Sequence[object]], has_grad: Iterable[bool]) -> StepShape:
    """The :class:`StepShape` of one recorded step."""
    return StepShape(step, lifecycle(events), tuple(bool(g) for g in has_grad))
