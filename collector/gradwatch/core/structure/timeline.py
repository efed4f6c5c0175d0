"""Where a run's structure changes for good: structure events (info findings), and the
safeguards a run stops using (warnings).

The rule, for each element of the signature (a step's lifecycle; whether one tensor
received a gradient): a *change* at step s is a new regime that shares no value with the
one before it. The values of the ``WINDOW`` steps before s and those of the ``WINDOW``
steps from s on (fewer at the run's edges, never fewer than ``SETTLE``) must be disjoint
sets. So a periodic pattern (accumulation, alternating heads, an expert that gets tokens on
some steps) is never a change — both windows hold both values — and neither is a
difference that lasts fewer than ``WINDOW`` steps and then reverts; the first steps of a
run (``SETTLE``) are never compared. A state element (a hyperparameter, a dtype, which
modules are in eval mode) changes only between two values that each held ``SETTLE`` steps
in a row, so a value a schedule moves on every step is no regime.

A *safeguard dropped* (``structure-safeguard``, a warning) is a change that removes a
protection the run had relied on for the rest of the run:

- a clipping function (``clip_grad_norm_``, ``clip_grad_value_``) or a scheduler step that
  recurred with every gap at most G steps is not seen again in the ``max(2G, WINDOW)`` or
  more steps that follow its last call. A scheduler that stops after its learning rates
  went flat (a warm-up that ended) stopped by design: that is info;
- a dropout/normalisation module (or the model) that trained in ``train()`` mode is in
  ``eval()`` mode from a step on, to the end of the run.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from gradwatch.core import checkids
from gradwatch.core.structure.signature import CLIP_WORDS, SCHEDULER, StepShape, words

#: how many steps on each side of a candidate change are compared
WINDOW: Final = 20
#: the fewest steps on each side that may show a change
SETTLE: Final = 5
CHECK: Final = checkids.STRUCTURE_CHANGE
SAFEGUARD: Final = checkids.STRUCTURE_SAFEGUARD
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


def regime_changes(values: Sequence[T], *, held: int = 1) -> list[Change]:
    """The indices where ``values`` enter a regime disjoint from the one before (only a
    run boundary can be one; each is judged on the values of the windows around it).
    ``held``: the fewest steps in a row each of the two values must hold."""
    out: list[Change] = []
    n = len(values)
    runs = _runs(values)
    for k in range(1, len(runs)):
        i = runs[k][1]
        if i < SETTLE or n - i < SETTLE:
            continue
        if runs[k - 1][2] < held or (runs[k][2] < held and k + 1 < len(runs)):
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


def _finding(
    step: int, message: str, details: dict[str, Any], *, hint: str = "", warn: bool = False
) -> dict[str, Any]:
    return {
        "check": SAFEGUARD if warn else CHECK,
        "severity": "warning" if warn else "info",
        "step": step,
        "param": None,
        "message": message,
        "hint": hint,
        "details": {"derived": "structure", **details},
    }


def _lifecycle_text(before: frozenset[str], after: frozenset[str]) -> str:
    old = " | ".join(sorted(before))
    new = " | ".join(sorted(after))
    kinds_before = {w for v in before for w in words(v)}
    kinds_after = {w for v in after for w in words(v)}
    gone = sorted(kinds_before - kinds_after)
    came = sorted(kinds_after - kinds_before)
    why = ""
    if gone:
        why = f" ({', '.join(gone)} is no longer called)"
    elif came:
        why = f" ({', '.join(came)} is called now)"
    return f"each step's lifecycle is '{new}' instead of '{old}'{why}"


# ---- safeguards: clipping and scheduler steps that stop for good ---------------------------


@functools.lru_cache(maxsize=1024)
def _words(lifecycle_text: str) -> frozenset[str]:
    """:func:`words`, once per distinct lifecycle (a run repeats a few)."""
    return frozenset(words(lifecycle_text))


@dataclass(frozen=True)
class Dropped:
    """A recurring lifecycle word last seen at ``last`` (an index), never after."""

    word: str
    first: int
    last: int
    gap: int  # the longest gap between two of its steps before it stopped


def dropped(shapes: Sequence[StepShape], word: str) -> Dropped | None:
    """Where ``word`` (a clip or scheduler) stops for the rest of the run: it recurred at
    least SETTLE times with every gap at most G, then is absent from the ``max(2G, WINDOW)``
    or more steps that follow its last occurrence."""
    at = [i for i, s in enumerate(shapes) if word in _words(s.lifecycle)]
    if len(at) < SETTLE:
        return None
    gap = max(b - a for a, b in itertools.pairwise(at))
    rest = len(shapes) - 1 - at[-1]
    if rest < max(2 * gap, WINDOW):
        return None
    return Dropped(word, at[0], at[-1], gap)


def _schedule_ended(shapes: Sequence[StepShape], d: Dropped) -> str | None:
    """Why the scheduler that stopped had finished its schedule (None: it had not): every
    group's rate is back at the base rate it was built for (``initial_lr``: a warm-up
    that ended), or the rates were flat over the WINDOW steps before it stopped."""
    after = shapes[d.last + 1]
    bases = [after.value(f"hp:g{g}.initial_lr") for g in range(len(after.lr))]
    if after.lr and all(
        b is not None and _close(float(b), lr) for b, lr in zip(bases, after.lr, strict=True)
    ):
        return (
            "the learning rates had reached the base rates it was built for (a warm-up that ended)"
        )
    recent = [s.lr for s in shapes[max(d.first, d.last - WINDOW) : d.last + 2] if s.lr]
    width = max((len(row) for row in recent), default=0)
    if not any(len({row[g] for row in recent if g < len(row)}) > 1 for g in range(width)):
        return "the learning rates were already flat (its schedule had ended)"
    return None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def _safeguard_finding(shapes: Sequence[StepShape], d: Dropped, label: str) -> dict[str, Any]:
    step = shapes[d.last + 1].step
    first, last = shapes[d.first].step, shapes[d.last].step
    rest = len(shapes) - 1 - d.last
    often = "on every step" if d.gap == 1 else f"at least every {d.gap} steps"
    had = f"it was called {often} from step {first:,} to step {last:,}"
    if d.word == SCHEDULER:
        ended = _schedule_ended(shapes, d)
        if ended is not None:
            return _finding(
                step,
                f"From step {step:,}{label}, no scheduler steps the learning rate any more; "
                f"{had}, and {ended}.",
                {"element": "lifecycle", "stopped": d.word},
            )
        return _finding(
            step,
            f"From step {step:,}{label}, no scheduler steps the learning rate any more: {had}, "
            f"while the learning rate was still moving, and the last {rest:,} steps keep the "
            "rate it had then.",
            {"element": "lifecycle", "stopped": d.word, "safeguard": "scheduler"},
            hint="check the code path after that step (a resume, a new loop) for the missing "
            "scheduler.step() call",
            warn=True,
        )
    return _finding(
        step,
        f"From step {step:,}{label}, {d.word} is no longer called before step(): {had}, and "
        f"the last {rest:,} steps of the run are not clipped.",
        {"element": "lifecycle", "stopped": d.word, "safeguard": "clipping"},
        hint="check the code path after that step (a resume, a new loop, a flag) for the "
        "missing clipping call",
        warn=True,
    )


def safeguards(shapes: Sequence[StepShape], label: str = "") -> list[dict[str, Any]]:
    """Clipping and scheduler steps that stop for the rest of the run."""
    out = []
    for word in sorted(CLIP_WORDS | {SCHEDULER}):
        d = dropped(shapes, word)
        if d is not None:
            out.append(_safeguard_finding(shapes, d, label))
    return out


# ---- the state: modes, hyperparameters, dtypes, schedulers, GradScaler --------------------

MODES: Final = "modes"


def _module_text(entry: str) -> str:
    name, _, cls = entry.rpartition(":")
    if entry.endswith("<model>"):
        return "the model" if entry == "<model>" else f"the model {entry[: -len('.<model>')]}"
    return f"{name} ({cls})" if name else entry


def mode_changes(shapes: Sequence[StepShape], label: str = "") -> list[dict[str, Any]]:
    """Modules that enter or leave eval() mode for good; one that trained in train() mode
    and stays in eval() to the end of the run is a warning."""
    seen = sorted(
        {e for s in shapes for e in (s.value(MODES) or "").split(",") if e},
    )
    groups: dict[tuple[int, str], list[str]] = {}
    for entry in seen:
        flags = [entry in (s.value(MODES) or "").split(",") for s in shapes]
        for c in regime_changes(flags, held=SETTLE):
            entering = True in c.after
            kind = "leaves" if not entering else "stays" if all(flags[c.index :]) else "enters"
            groups.setdefault((c.index, kind), []).append(entry)
    out = []
    for (index, kind), entries in sorted(groups.items()):
        step = shapes[index].step
        names = ", ".join(_module_text(e) for e in entries[:SHOWN])
        names += f" and {len(entries) - SHOWN} more" if len(entries) > SHOWN else ""
        details = {"element": MODES, "modules": entries, "change": kind}
        if kind == "stays":
            dropout = any("Dropout" in e or e.endswith("<model>") for e in entries)
            off = "dropout is off" if dropout else "the running statistics are frozen"
            out.append(
                _finding(
                    step,
                    f"From step {step:,}{label}, {names} "
                    f"{'is' if len(entries) == 1 else 'are'} in eval() mode while training "
                    f"continues, to the end of the run (train() mode before): {off} from "
                    "then on.",
                    {**details, "safeguard": "train-mode"},
                    hint="call model.train() after every evaluation (a helper that calls "
                    ".eval() on a submodule must switch it back)",
                    warn=True,
                )
            )
        else:
            where = "in eval() mode" if kind == "enters" else "back in train() mode"
            out.append(_finding(step, f"From step {step:,}{label}, {names} {where}.", details))
    return out


def autocast_text(state: str | None) -> str:
    """``under autocast (cpu, bfloat16)``, ``without autocast``, or for a step whose
    forwards ran under several states ``under several autocast states (cpu bfloat16 + off)``."""
    if not state or state == "off":
        return "without autocast"
    if " + " in state:
        return f"under several autocast states ({state})"
    device, _, dtype = state.partition(" ")
    return f"under autocast ({device}, {dtype})"


def _state_text(element: str, old: str | None, new: str | None) -> str:
    if element == "dtype":
        return f"the dtypes are '{new}' instead of '{old}'"
    if element == "scaler":
        return f"the GradScaler's part is '{new}' instead of '{old}'"
    if element == "autocast":
        return f"the training forward runs {autocast_text(new)} instead of {autocast_text(old)}"
    if element == "sched":
        return (
            f"the schedulers drive '{new or 'no group'}' instead of '{old or 'no group'}' "
            "(scheduler:param groups)"
        )
    group, _, key = element.removeprefix("hp:").partition(".")
    if old is None:
        return f"param group {group[1:]} has {key} {new} (a new group)"
    if new is None:
        return f"param group {group[1:]} (with {key} {old}) is gone"
    return f"param group {group[1:]}'s {key} is {new} instead of {old}"


def _grouped(items: list[tuple[str, str]], now: StepShape, before: StepShape) -> list[str]:
    """The texts of one step's changes, a param group that appeared or went said once with
    its hyperparameters (``param group 1 is new (momentum 0, weight_decay 0)``) instead of
    once per hyperparameter."""
    texts: list[str] = []
    whole: dict[str, tuple[str, list[str]]] = {}  # group -> (new/gone, "key value" items)
    for element, text in items:
        group, _, key = element.removeprefix("hp:").partition(".")
        if element.startswith("hp:") and (now.value(element) is None) != (
            before.value(element) is None
        ):
            kind = "gone" if now.value(element) is None else "new"
            value = before.value(element) if kind == "gone" else now.value(element)
            if group not in whole:
                whole[group] = (kind, [])
                texts.append(group)  # its place in the sentence
            whole[group][1].append(f"{key} {value}")
            continue
        texts.append(text)
    out = []
    for t in texts:
        if t in whole:
            kind, pairs = whole[t]
            what = "is new" if kind == "new" else "is gone"
            out.append(f"param group {t[1:]} {what} ({', '.join(pairs)})")
        else:
            out.append(t)
    return out


def state_changes(shapes: Sequence[StepShape], label: str = "") -> list[dict[str, Any]]:
    """Changes of the hyperparameters, dtypes, autocast, schedulers and GradScaler, one
    finding per step (every element that changed at it named)."""
    elements = sorted({k for s in shapes for k, _ in s.state if k != MODES})
    by_step: dict[int, list[tuple[str, str]]] = {}
    for element in elements:
        values = [s.value(element) for s in shapes]
        for c in regime_changes(values, held=SETTLE):
            old, new = values[c.index - 1], values[c.index]
            if old is None and not element.startswith("hp:"):
                continue  # first recorded by a later collector: nothing changed
            if new == '"scheduled"':
                continue  # a schedule's: followed no more
            by_step.setdefault(c.index, []).append((element, _state_text(element, old, new)))
    out = []
    for index, items in sorted(by_step.items()):
        step = shapes[index].step
        text = "; ".join(_grouped(items, shapes[index], shapes[index - 1]))
        out.append(
            _finding(
                step,
                f"From step {step:,}{label}, {text}.",
                {"element": "state", "changed": [e for e, _ in items]},
            )
        )
    return out


def changes(
    shapes: Sequence[StepShape], names: Sequence[str], label: str = ""
) -> list[dict[str, Any]]:
    """Structure findings of one optimizer's steps (``names``: its tensors in the order of
    ``has_grad``; ``label``: `` of optimizer 1`` where a run has several): changes (info)
    and dropped safeguards (warnings)."""
    out = safeguards(shapes, label)
    stopped = {int(f["step"]): str(f["details"]["stopped"]) for f in out}
    for c in regime_changes([s.lifecycle for s in shapes]):
        step = shapes[c.index].step
        gone = {w for v in c.before for w in words(v)} - {w for v in c.after for w in words(v)}
        if gone and stopped.get(step) in gone and gone <= set(stopped.values()):
            continue  # said by the safeguard finding
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
    out += mode_changes(shapes, label)
    out += state_changes(shapes, label)
    return sorted(out, key=lambda f: int(f["step"]))
