"""A replicate group's invariants, learned from its good runs and checked on another.

Replicates are runs with the same config hash and code hash (as for drift), made by
another process (runs one process makes one after another are parts of one program), and the same
parameter layout. The *good* runs are those of the group that finished with no error
finding; with fewer than ``MIN_GOOD`` of them nothing is learned. What held on every step of
every good run is an invariant:

- a tensor received a gradient on every step (or on none);
- every step after the first had one of at most ``MAX_LIFECYCLES`` lifecycles (and the first
  step one of the first steps' lifecycles);
- a state element (which modules are in eval mode, a param group's hyperparameter, the
  schedulers and the groups they drive, the dtypes, the autocast state of the training
  forward, the GradScaler's part) had one value on every step.

Another run of the group breaks an invariant at the first step from which it differs for
``PERSIST`` steps in a row (or to its end, if it ends sooner): one step that differs is not
enough, so a replicate whose conditional computation happens to skip a tensor once is not
flagged. A break is a warning naming the invariant and the runs it was learned from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gradwatch.core import checkids
from gradwatch.core.structure.signature import StepShape, shapes
from gradwatch.core.structure.timeline import names_text

MIN_GOOD: Final = 2
MAX_LIFECYCLES: Final = 3
PERSIST: Final = 5
CHECK: Final = checkids.GROUP_INVARIANT
#: how many of the newest run folders are looked at for the group
RECENT: Final = 64


@dataclass
class Member:
    """One run of a possible group, as the invariants need it."""

    id: str
    name: str
    key: tuple[str, str] | None  # (config hash, code hash), None where either is unknown
    layout: tuple[tuple[str, ...], ...]  # tensor names per optimizer
    status: str
    has_error: bool
    started_at: float = 0.0
    shapes: dict[int, list[StepShape]] = field(default_factory=dict)
    #: (host, pid) of the process that made the run: runs one process makes one after
    #: another (a loop over schedulers or settings) are parts of one program, not replicates
    process: tuple[str, int] | None = None
    #: the collector stored the run's structure changes with its findings (END says so:
    #: gradwatch.core.structure.recorder); readers derive them only for runs without this
    stored: bool = False


@dataclass
class Invariants:
    """What held in every good run of a group, per optimizer."""

    runs: list[str]  # names of the good runs it was learned from
    always: dict[int, list[int]]  # tensor indices with a gradient on every step
    never: dict[int, list[int]]  # tensor indices with a gradient on no step
    lifecycles: dict[int, frozenset[str]]  # the lifecycles of every step after the first
    states: dict[int, dict[str, str]] = field(default_factory=dict)  # element -> its value
    #: the lifecycles of the first step (it may differ from the later ones: no clearing yet)
    firsts: dict[int, frozenset[str]] = field(default_factory=dict)


def learn(good: Sequence[Member]) -> Invariants | None:
    """The invariants of ``good`` runs (same layout), or None with fewer than MIN_GOOD."""
    if len(good) < MIN_GOOD:
        return None
    labels = [m.name for m in good]
    if len(set(labels)) < len(labels):  # replicates of one name: told apart by their ids
        labels = [f"{m.name} ({m.id.rsplit('-', 1)[-1]})" for m in good]
    inv = Invariants(labels, {}, {}, {})
    for o, names in enumerate(good[0].layout):
        rows = [s for m in good for s in m.shapes.get(o, [])]
        if not rows or any(not m.shapes.get(o) for m in good):
            continue
        inv.always[o] = [j for j in range(len(names)) if all(r.has_grad[j] for r in rows)]
        inv.never[o] = [j for j in range(len(names)) if not any(r.has_grad[j] for r in rows)]
        later = frozenset(s.lifecycle for m in good for s in m.shapes[o][1:])
        if later and len(later) <= MAX_LIFECYCLES:
            inv.lifecycles[o] = later
            inv.firsts[o] = frozenset(m.shapes[o][0].lifecycle for m in good)
        inv.states[o] = _constant_states(rows)
    return inv


def _constant_states(rows: Sequence[StepShape]) -> dict[str, str]:
    """The state elements recorded on every step of ``rows`` with one value throughout."""
    values: dict[str, set[str]] = {}
    for r in rows:
        for key, value in r.state:
            values.setdefault(key, set()).add(value)
    return {
        k: next(iter(v))
        for k, v in values.items()
        if len(v) == 1 and all(r.value(k) is not None for r in rows)
    }


def element_text(element: str) -> str:
    """How a sentence names a state element of the signature (``hp:g0.weight_decay``)."""
    if element.startswith("hp:"):
        group, _, key = element.removeprefix("hp:").partition(".")
        return f"param group {group[1:]}'s {key}"
    return {
        "modes": "the modules in eval() mode",
        "dtype": "the dtypes",
        "autocast": "the training forward's autocast state",
        "sched": "the schedulers and the groups they drive",
        "scaler": "the GradScaler's part",
    }.get(element, element)


def _state_breaks(run: Member, inv: Invariants, o: int, label: str) -> list[dict[str, Any]]:
    rows = run.shapes.get(o, [])
    out = []
    for element, expected in sorted(inv.states.get(o, {}).items()):
        values = [r.value(element) for r in rows]
        at = first_lasting([v is not None and v != expected for v in values], 0)
        if at is None:
            continue
        step = rows[at].step
        out.append(
            _finding(
                step,
                f"{element_text(element)}{label} was '{expected or 'none'}' on every step in "
                f"runs {_runs_text(inv.runs)}; in this run it is '{values[at] or 'none'}' "
                f"from step {step:,}.",
                {"invariant": f"state:{element}", "learned_from": inv.runs, "expected": expected},
            )
        )
    return out


def first_lasting(flags: Sequence[bool], start: int = 0) -> int | None:
    """The first index ≥ ``start`` from which ``flags`` hold PERSIST times in a row (all of
    the steps from ``start`` in a run with fewer)."""
    i = start
    while i < len(flags):
        if flags[i]:
            j = i
            while j < len(flags) and flags[j]:
                j += 1
            if j - i >= min(PERSIST, len(flags) - start):
                return i
            i = j
        else:
            i += 1
    return None


def _finding(step: int, message: str, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "check": CHECK,
        "severity": "warning",
        "step": step,
        "param": None,
        "message": message,
        "hint": "compare this run's code path and config with those runs'",
        "details": {"derived": "structure", **details},
    }


def _runs_text(runs: Sequence[str]) -> str:
    return ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")


def _tensor_breaks(
    run: Member, inv: Invariants, o: int, label: str, which: str
) -> list[dict[str, Any]]:
    rows = run.shapes.get(o, [])
    indices = (inv.always if which == "always" else inv.never).get(o, [])
    by_step: dict[int, list[str]] = {}
    for j in indices:
        if which == "always":
            flags = [not r.has_grad[j] for r in rows]
        else:
            flags = [r.has_grad[j] for r in rows]
        at = first_lasting(flags, 0)
        if at is not None:
            by_step.setdefault(rows[at].step, []).append(run.layout[o][j])
    out = []
    for step, names in sorted(by_step.items()):
        one = len(names) == 1
        if which == "always":
            held = f"received a gradient on every step in runs {_runs_text(inv.runs)}"
            now = f"in this run {'it has' if one else 'they have'} none from step {step:,}"
        else:
            held = f"received no gradient on any step in runs {_runs_text(inv.runs)}"
            now = f"in this run {'it gets' if one else 'they get'} gradients from step {step:,}"
        out.append(
            _finding(
                step,
                f"{names_text(names)}{label} {held}; {now}.",
                {"invariant": f"grads-{which}", "tensors": names, "learned_from": inv.runs},
            )
        )
    return out


def _lifecycle_break(run: Member, inv: Invariants, o: int, label: str) -> list[dict[str, Any]]:
    allowed = inv.lifecycles.get(o)
    rows = run.shapes.get(o, [])
    if not allowed or len(rows) < 2:
        return []
    flags = [r.lifecycle not in allowed for r in rows]
    firsts = inv.firsts.get(o)
    if firsts is not None:  # the first step too, against the good runs' first steps
        flags[0] = rows[0].lifecycle not in firsts
    at = first_lasting(flags, 0 if firsts is not None else 1)
    if at is None:
        return []
    step = rows[at].step
    held = " | ".join(sorted(allowed))
    # from the first step on: say the later steps' lifecycle (the first may lack a clearing)
    shown = rows[1] if at == 0 and len(rows) > 1 and flags[1] else rows[at]
    return [
        _finding(
            step,
            f"Every step{label} in runs {_runs_text(inv.runs)} was '{held}'; in this run "
            f"steps are '{shown.lifecycle}' from step {step:,}.",
            {"invariant": "lifecycle", "learned_from": inv.runs, "expected": sorted(allowed)},
        )
    ]


def check(run: Member, inv: Invariants) -> list[dict[str, Any]]:
    """Warnings where ``run`` breaks the group's invariants, at the first differing step."""
    out: list[dict[str, Any]] = []
    for o in range(len(run.layout)):
        label = f" (optimizer {o})" if len(run.layout) > 1 else ""
        out += _lifecycle_break(run, inv, o, label)
        out += _state_breaks(run, inv, o, label)
        out += _tensor_breaks(run, inv, o, label, "always")
        out += _tensor_breaks(run, inv, o, label, "never")
    return sorted(out, key=lambda f: int(f["step"]))


# ---- reading a group from the data directory -------------------------------------------


def member(run_dir: Path, has_error: Callable[[Path], bool]) -> Member:
    """The run in ``run_dir`` as a :class:`Member` (its whole spool is read)."""
    from gradwatch.core.local_reader import load_run

    run = load_run(run_dir)
    config = run.start.get("config_hash") or run.fingerprint.get("config_hash")
    code = run.fingerprint.get("code_hash")
    tensors = run.start.get("tensors", [])
    layout = tuple(
        tuple(t["name"] for t in tensors if t.get("optimizer") == o)
        for o in range(len(run.start.get("optimizers", [])))
    )
    return Member(
        id=run.id,
        name=str(run.start.get("name") or run.id),
        key=(str(config), str(code)) if config and code else None,
        layout=layout,
        status=str((run.end or {}).get("status") or "running"),
        has_error=has_error(run_dir),
        started_at=float(run.start.get("started_at") or 0.0),
        shapes={o: shapes(rows) for o, rows in run.steps.items()},
        process=_process(run.start),
        stored=(run.end or {}).get("structure") == "stored",
    )


def _process(start: dict[str, Any]) -> tuple[str, int] | None:
    pid, host = start.get("pid"), start.get("host")
    return (str(host), pid) if isinstance(pid, int) and host else None


def _config_hash(run_dir: Path) -> str | None:
    from gradwatch.core.spool import read_start

    value = read_start(run_dir).get("config_hash")
    return str(value) if value else None


def group_findings(
    subject: Member, run_dir: Path, has_error: Callable[[Path], bool]
) -> list[dict[str, Any]]:
    """Warnings for ``subject`` (the run in ``run_dir``) from the invariants of its
    replicate group among the other recent runs of its data directory (none without
    MIN_GOOD good ones)."""
    config = _config_hash(run_dir)
    if config is None or subject.key is None:
        return []
    siblings = sorted(p for p in run_dir.parent.iterdir() if p.is_dir() and p != run_dir)
    candidates = [p for p in siblings[-RECENT:] if _config_hash(p) == config]
    if len(candidates) < MIN_GOOD:
        return []
    others = sorted((member(p, has_error) for p in candidates), key=lambda m: m.started_at)
    good = [
        m
        for m in others
        if m.key == subject.key
        and m.layout == subject.layout
        and m.status == "finished"
        and not m.has_error
        and (m.process is None or m.process != subject.process)  # another invocation
    ]
    inv = learn(good)
    return [] if inv is None else check(subject, inv)


def derived_changes(subject: Member) -> list[dict[str, Any]]:
    """The structure changes and dropped safeguards of ``subject``, derived from its steps
    (what the collector stores at close, :mod:`gradwatch.core.structure.recorder`)."""
    from gradwatch.core.structure.timeline import changes

    out: list[dict[str, Any]] = []
    for o, names in enumerate(subject.layout):
        label = f" (optimizer {o})" if len(subject.layout) > 1 else ""
        out += changes(subject.shapes.get(o, []), names, label)
    return out


def run_findings(run_dir: Path, has_error: Callable[[Path], bool]) -> list[dict[str, Any]]:
    """The structure findings of the run in ``run_dir`` not stored with it: its structure
    changes (info, warnings for dropped safeguards) unless the collector stored them (a
    run recorded by an earlier collector, or one that did not close), and where it breaks
    its replicate group's invariants (warnings; these need the other runs, so they are
    always derived when read)."""
    subject = member(run_dir, has_error)
    out = [] if subject.stored else derived_changes(subject)
    out += group_findings(subject, run_dir, has_error)
    return [{"run": subject.id, **f} for f in sorted(out, key=lambda f: int(f["step"]))]
