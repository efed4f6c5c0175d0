"""One optimizer step's structure: its lifecycle, its state, which tensors got a gradient.

The **lifecycle** is the order of the step's action events as the collector recorded them
(the events since the previous ``step()``), with repeats run together: ``zero_grad
backward×4`` is four micro-batches after one clearing. A clip is named by its function
(``clip_grad_norm_``; the in-place edit it makes is part of it), a scheduler step is
``scheduler``. Events that say what gradwatch itself did (``skipped`` by a policy) are
left out; the learning rate is left out too (schedules change it by design).

The **state** is what :mod:`gradwatch.hooks.structure_probe` records on change only, carried
forward from step to step: which groups each scheduler drives (``sched``), the
dropout/normalisation modules in ``eval()`` (``modes``), each param group's hyperparameters
other than the learning rate (``hp:g0.weight_decay``), the dtypes (``dtype``), the
autocast state of the training forwards (``autocast``: ``cpu bfloat16``, ``off``) and the
GradScaler's part (``scaler``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

#: events that describe gradwatch's own action, not the training loop's structure
OWN_EVENTS: Final = frozenset({"skipped"})
#: events that carry a state (written by gradwatch.hooks.structure_probe), not an action
STATE_KINDS: Final = frozenset({"sched", "modes", "hparams", "dtype", "autocast", "scaler"})
#: the lifecycle words of the safeguards whose end is a warning of its own
CLIP_WORDS: Final = frozenset({"clip_grad_norm_", "clip_grad_value_"})
SCHEDULER: Final = "scheduler"


@dataclass(frozen=True)
class StepShape:
    """The structure of one optimizer step."""

    step: int
    lifecycle: str
    has_grad: tuple[bool, ...]
    state: tuple[tuple[str, str], ...] = ()  # (element, value), sorted by element
    lr: tuple[float, ...] = field(default=(), compare=False)

    def value(self, element: str) -> str | None:
        """The state ``element``'s value at this step (None: never recorded)."""
        for key, v in self.state:
            if key == element:
                return v
        return None


def _word(kind: str, detail: str) -> str:
    if kind == "clip":
        return detail if detail in CLIP_WORDS else "clip"
    return kind


def lifecycle(events: Iterable[Sequence[object]]) -> str:
    """``"zero_grad backward×4"``: the kinds of ``events`` in order, repeats counted."""
    runs: list[list[object]] = []
    last = ""
    for event in events:
        kind = str(event[0])
        if kind in OWN_EVENTS or kind in STATE_KINDS:
            continue
        if kind == "grad_modified" and last == "clip":
            continue  # the clip's own in-place scaling
        last = kind
        word = _word(kind, str(event[2]) if len(event) > 2 else "")
        if runs and runs[-1][0] == word:
            runs[-1][1] = int(str(runs[-1][1])) + 1
        else:
            runs.append([word, 1])
    words = [str(k) if n == 1 else f"{k}×{n}" for k, n in runs]
    return " ".join(words) if words else "(nothing)"


def words(lifecycle_text: str) -> set[str]:
    """The event words of a lifecycle (``backward×4`` → ``backward``)."""
    return {w.split("×")[0] for w in lifecycle_text.split()}


def apply_state(state: dict[str, str], events: Iterable[Sequence[object]]) -> None:
    """Update ``state`` with the state events among ``events``."""
    for event in events:
        kind = str(event[0])
        if kind not in STATE_KINDS:
            continue
        detail = str(event[2]) if len(event) > 2 else ""
        if kind != "hparams":
            state[kind] = detail
            continue
        try:
            changed: dict[str, Any] = json.loads(detail)
        except ValueError:
            continue
        for key, value in changed.items():
            if value is None:
                state.pop(f"hp:{key}", None)
            else:
                state[f"hp:{key}"] = json.dumps(value)


def shape(
    step: int,
    events: Iterable[Sequence[object]],
    has_grad: Iterable[bool],
    state: dict[str, str] | None = None,
    lr: Iterable[float] = (),
) -> StepShape:
    """The :class:`StepShape` of one recorded step (``state``: carried from the steps
    before; updated in place with this step's state events)."""
    events = list(events)
    carried = {} if state is None else state
    apply_state(carried, events)
    return StepShape(
        step,
        lifecycle(events),
        tuple(bool(g) for g in has_grad),
        tuple(sorted(carried.items())),
        tuple(float(x) for x in lr),
    )


class _Row(Protocol):
    step: int
    events: list[tuple[str, float, str]]
    has_grad: list[bool]
    lr: list[float]


def shapes(rows: Iterable[_Row]) -> list[StepShape]:
    """The shapes of one optimizer's recorded steps, in order (state carried forward)."""
    state: dict[str, str] = {}
    return [shape(r.step, r.events, r.has_grad, state, r.lr) for r in rows]
