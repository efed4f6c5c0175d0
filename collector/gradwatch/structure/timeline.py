"""Where a run's structure changes for good: structure events (info findings).

The rule, for each element of the signature (a step's lifecycle; whether one tensor
received a gradient): a *change* at step s is a new regime that shares no value with the
one before it. The values of the ``WINDOW`` steps before s and those of the ``WINDOW``
steps from s on (fewer at the run's edges, never fewer than ``SETTLE``) must be disjoint
sets. So a periodic pattern (accumulation, alternating heads, an expert that gets tokens on
some steps) is never a change — both windows hold both values — and neither is a
difference that lasts fewer than ``WINDOW`` steps and then reverts; the first steps of a
run (``SETTLE``) are never compared.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from gradwatch.structure.signature import StepShape

#: how many steps on each side of a candidate change are compared
WINDOW: Final = 20
#: the fewest steps on each side that may show a change
SETTLE: Final = 5
CHECK: Final = "structure-change"
#: tensor names listed in a message before "…"
SHOWN: Final = 3

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True)
class Change:
    """A new regime of one element from ``index`` on (an index into the sequence)."""

    index: int
    before: frozenset[Any]
    after: frozenset[Any]


def _runs(values: Sequence[T]) -> list[tuple[T, int, int]]:
    """``values`` as runs of equal values: (value, first index, length)."""
    out: list[tuple[T, int, int]] = []
    for i, v in enumerate(values):
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1], out[-1][2] + 1)
        else:
            out.append((v, i, 1))
    return out


def _window(runs: list[tuple[T, int, int]], k: int, step: int, span: int) -> frozenset[T]:
    """The values of the ``span`` positions next to run ``k``'s start, walking ``step``
    (-1: before it, +1: from it on)."""
    seen: set[T] = set()
    covered = 0
    k = k - 1 if step < 0 else k
    while 0 <= k < len(runs) and covered < span:
        seen.add(runs[k][0])
        covered += runs[k][2]
        k += step
    return frozenset(seen)


def regime_changes(values: Sequence[T]) -> list[Change]:
    """The indices where ``values`` enter a regime disjoint from the one before (only a
    run boundary can be one; each is judged on the values of the windows around it)."""
    out: list[Change] = []
    n = len(values)
    runs = _runs(values)
    for k in range(1, len(runs)):
        i = runs[k][1]
        if i < SETTLE or n - i < SETTLE:
            continue
        after = _window(runs, k, +1, WINDOW)
        if runs[k - 1][0] in after:
            continue
        before = _window(runs, k, -1, min(WINDOW, i))
        if before.isdisjoint(after):
            out.append(Change(i, before, after))
    return out


def names_text(names: Sequence[str]) -> str:
    """``"encoder.weight"`` or ``"3 tensors (a, b, c)"`` or ``"5 tensors (a, b, c, …)"``."""
    if len(names) == 1:
        return names[0]
    shown = ", ".join(names[:SHOWN]) + (", …" if len(names) > SHOWN else "")
    return f"{len(names)} tensors ({shown})"


#: a tensor's gradients stopped or started, for one tensor and for several
_GRAD_WORDS: Final = {
    "stopped": (
        "no longer receives gradients; it did on every step before (frozen?)",
        "no longer receive gradients; they did on every step before (frozen?)",
    ),
    "started": (
        "receives gradients; it had none before (unfrozen?)",
        "receive gradients; they had none before (unfrozen?)",
    ),
}


def _finding(step: int, message: str, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "check": CHECK,
        "severity": "info",
        "step": step,
        "param": None,
        "message": message,
        "hint": "",
        "details": {"derived": "structure", **details},
    }


def _lifecycle_text(before: frozenset[str], after: frozenset[str]) -> str:
    old = " | ".join(sorted(before))
    new = " | ".join(sorted(after))
    kinds_before = {w.split("×")[0] for v in before for w in v.split()}
    kinds_after = {w.split("×")[0] for v in after for w in v.split()}
    gone = sorted(kinds_before - kinds_after)
    came = sorted(kinds_after - kinds_before)
    why = ""
    if gone:
        why = f" ({', '.join(gone)} is no longer called)"
    elif came:
        why = f" ({', '.join(came)} is called now)"
    return f"each step's lifecycle is '{new}' instead of '{old}'{why}"


def changes(
    shapes: Sequence[StepShape], names: Sequence[str], label: str = ""
) -> list[dict[str, Any]]:
    """Structure-change findings of one optimizer's steps (``names``: its tensors in the
    order of ``has_grad``; ``label``: `` of optimizer 1`` where a run has several)."""
    out: list[dict[str, Any]] = []
    for c in regime_changes([s.lifecycle for s in shapes]):
        step = shapes[c.index].step
        text = _lifecycle_text(c.before, c.after)
        out.append(_finding(step, f"From step {step:,}{label}, {text}.", {"element": "lifecycle"}))
    groups: dict[tuple[int, str], list[str]] = {}  # (index, "stopped" | "started") -> names
    for j, name in enumerate(names):
        seq = [s.has_grad[j] if j < len(s.has_grad) else False for s in shapes]
        for c in regime_changes(seq):
            key = (c.index, "stopped" if True in c.before else "started")
            groups.setdefault(key, []).append(name)
    for (index, change), group in sorted(groups.items()):
        step, one = shapes[index].step, len(group) == 1
        what = _GRAD_WORDS[change][0 if one else 1]
        out.append(
            _finding(
                step,
                f"From step {step:,}{label}, {names_text(group)} {what}.",
                {"element": "grads", "tensors": group, "change": change},
            )
        )
    return sorted(out, key=lambda f: int(f["step"]))
