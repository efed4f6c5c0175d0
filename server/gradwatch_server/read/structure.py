"""A run's structure timeline and its replicate group's invariants, read from the stored
steps (:mod:`gradwatch.core.structure`: the same rules and sentences as ``gradwatch findings``).

A run's timeline (structure changes, dropped safeguards) is stored with its findings by
the collector that recorded it when its END record says so (``structure: "stored"``,
:mod:`gradwatch.core.structure.recorder`); those are returned as stored. For a run without it (an
earlier collector, a run that never closed) and for the group invariants, nothing is
stored: the per-step lifecycle events (a STEPS chunk's meta), which
tensors received a gradient (its ``has_grad`` blob) and the learning rates (``lr``) are
what the collector already sends. A run is read once per version (its frame count and end
status): :class:`ShapeCache` keeps the last ``CACHED`` runs' shapes, so a dashboard
polling a finished run reads its chunks once. The cost of one read is bounded: at most
``MAX_STEPS`` steps per optimizer and ``MAX_CELLS`` steps × tensors are read (the first
ones; the reply says how many, and a problem note says the rest was not read), and a
group is learned from at most ``MAX_MEMBERS`` of its newest runs.

A group here is the collector's (:mod:`gradwatch.core.structure.group`): runs of one project
with the same config and code hash (both known), the same parameter layout, made by
another process; its invariants are learned from the runs that finished with no error
finding (at least two), and each run is checked against those learned from the *other*
good runs (so a good run is checked too).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from sqlalchemy import and_, select
from sqlmodel import Session, col

from gradwatch.core.structure.group import Invariants, Member, check, element_text, learn
from gradwatch.core.structure.recorder import MARKER, STORED
from gradwatch.core.structure.signature import STATE_KINDS, StepShape, apply_state, lifecycle
from gradwatch.core.structure.timeline import CHECK, SAFEGUARD, changes, names_text
from gradwatch_server.groupkey import group_key
from gradwatch_server.jsontext import load_json
from gradwatch_server.models import Finding, Project, Run, SeriesBlob, SeriesChunk
from gradwatch_server.problems import note
from gradwatch_server.read.groups import in_group

#: steps read per optimizer (the first ones) and steps × tensors read per run
MAX_STEPS: Final = 50_000
MAX_CELLS: Final = 2_000_000
#: the newest runs of a group read to learn its invariants
MAX_MEMBERS: Final = 8
#: runs whose shapes are kept between requests
CACHED: Final = 8


@dataclass
class Read:
    """One run's shapes as the structure rules need them, and how much of it was read."""

    member: Member
    steps_read: int  # steps read over all optimizers
    truncated: bool  # the run has more steps than were read
    #: per optimizer, the tensors whose gradient came on some steps and not on others
    varying: dict[int, list[int]] = field(default_factory=dict)
    #: the timeline, computed once per read (``timeline``)
    found: list[dict[str, Any]] | None = None
    #: the run's version when read: (id, frames, end status)
    version: tuple[Any, ...] = ()


class ShapeCache:
    """The last ``CACHED`` runs read, keyed by (run id, frames, end status): a run that
    receives a frame is read afresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: OrderedDict[tuple[str, int, str | None], Read] = OrderedDict()

    def get(self, key: tuple[str, int, str | None]) -> Read | None:
        """The cached read of ``key``, if any (now the most recent)."""
        with self._lock:
            found = self._runs.get(key)
            if found is not None:
                self._runs.move_to_end(key)
            return found

    def put(self, key: tuple[str, int, str | None], read: Read) -> None:
        """Keep ``read`` (the oldest beyond ``CACHED`` forgotten)."""
        with self._lock:
            self._runs[key] = read
            self._runs.move_to_end(key)
            while len(self._runs) > CACHED:
                self._runs.popitem(last=False)


CACHE = ShapeCache()


def layout(start_meta: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    """The tensor names of each optimizer, from a run's start record."""
    tensors = start_meta.get("tensors")
    optimizers = start_meta.get("optimizers")
    if not isinstance(tensors, list) or not isinstance(optimizers, list):
        return ()
    return tuple(
        tuple(
            str(t.get("name")) for t in tensors if isinstance(t, dict) and t.get("optimizer") == o
        )
        for o in range(len(optimizers))
    )


def _has_errors(session: Session, run_ids: Sequence[str]) -> set[str]:
    if not run_ids:
        return set()
    query = (
        select(col(Finding.run_id))
        .where(col(Finding.run_id).in_(list(run_ids)), col(Finding.severity) == "error")
        .distinct()
    )
    return {str(r) for r in session.execute(query).scalars()}


def read_run(session: Session, run: Run, has_error: bool) -> Read:
    """``run``'s shapes per optimizer (cached by version), bounded by MAX_STEPS/MAX_CELLS."""
    key = (run.id, run.frames, run.end_status)
    found = CACHE.get(key)
    if found is not None and found.member.has_error == has_error:
        return found
    start = load_json(run.start_meta) or {}
    start = start if isinstance(start, dict) else {}
    names = layout(start)
    width = max((len(n) for n in names), default=0)
    budget = min(MAX_STEPS, MAX_CELLS // max(width, 1))
    shapes: dict[int, list[StepShape]] = {}
    varying: dict[int, list[int]] = {}
    truncated = False
    for o in range(len(names)):
        shapes[o], varying[o], cut = _optimizer_shapes(session, run.id, o, budget)
        truncated = truncated or cut
    member = Member(
        id=run.id,
        name=run.name or run.id,
        key=(run.config_hash, run.code_hash) if run.config_hash and run.code_hash else None,
        layout=names,
        status=run.end_status or "running",
        has_error=has_error,
        started_at=run.started_at or 0.0,
        shapes=shapes,
        process=(str(run.host), int(run.pid)) if run.host and run.pid is not None else None,
    )
    if truncated:
        note(
            f"run {run.id[:40]}: its structure was read for the first {budget:,} steps only "
            f"(at most {MAX_CELLS:,} steps × tensors a read)"
        )
    read = Read(member, sum(len(s) for s in shapes.values()), truncated, varying, None, key)
    CACHE.put(key, read)
    return read


def _optimizer_shapes(
    session: Session, run_id: str, optimizer: int, budget: int
) -> tuple[list[StepShape], list[int], bool]:
    """The first ``budget`` recorded steps of one optimizer as shapes (state carried
    forward in step order), the tensors whose gradient varied over them, and whether more
    steps were recorded. Equal lifecycles, gradient patterns and states are one object
    each (a long run repeats a few of them)."""
    blobs = {}
    for name in ("has_grad", "lr"):
        blobs[name] = SeriesBlob.__table__.alias(name)  # type: ignore[attr-defined]
    query = select(
        col(SeriesChunk.steps),
        col(SeriesChunk.meta),
        blobs["has_grad"].c.data,
        blobs["has_grad"].c.rows,
        blobs["lr"].c.data,
        blobs["lr"].c.rows,
    )
    for name, blob in blobs.items():
        query = query.outerjoin(
            blob,
            and_(
                blob.c.run_id == col(SeriesChunk.run_id),
                blob.c.seq == col(SeriesChunk.seq),
                blob.c.name == name,
            ),
        )
    query = query.where(
        col(SeriesChunk.run_id) == run_id, col(SeriesChunk.optimizer) == optimizer
    ).order_by(col(SeriesChunk.step_first), col(SeriesChunk.seq))
    rows: list[tuple[int, list[Any], bytes, tuple[float, ...]]] = []
    grads_seen: dict[bytes, tuple[bool, ...]] = {}
    some: np.ndarray[Any, Any] | None = None  # a gradient on some step, per tensor
    every: np.ndarray[Any, Any] | None = None  # a gradient on every step, per tensor
    cut = False
    for steps_raw, meta_text, grad_raw, grad_rows, lr_raw, lr_rows in session.execute(query):
        if len(rows) >= budget:
            cut = True
            break
        steps = np.frombuffer(steps_raw, dtype="<i8").tolist()
        n = len(steps)
        meta = load_json(meta_text)
        events = meta.get("events") if isinstance(meta, dict) else None
        if not isinstance(events, list) or len(events) != n:
            note(f"the lifecycle events of {n} steps are stored damaged; their structure is unread")
            continue
        grads = _matrix(grad_raw, grad_rows, n, "u1").astype(bool)
        rates = _matrix(lr_raw, lr_rows, n, "<f8")
        if grads.shape[0]:
            got: np.ndarray[Any, Any] = np.asarray(grads.any(axis=1))
            full: np.ndarray[Any, Any] = np.asarray(grads.all(axis=1))
            some = got if some is None else some | got
            every = full if every is None else every & full
        columns = np.ascontiguousarray(grads.T)
        for i, step in enumerate(steps):
            key = columns[i].tobytes()
            if key not in grads_seen:
                grads_seen[key] = tuple(bool(x) for x in columns[i])
            step_events = events[i] if isinstance(events[i], list) else []
            rows.append(
                (
                    int(step),
                    [e for e in step_events if isinstance(e, list) and e],
                    key,
                    tuple(float(x) for x in rates[:, i]),
                )
            )
    rows.sort(key=lambda r: r[0])
    if len(rows) > budget:
        rows, cut = rows[:budget], True
    varying = (
        [] if some is None or every is None else [int(j) for j in np.flatnonzero(some & ~every)]
    )
    return _shapes(rows, grads_seen), varying, cut


def _shapes(
    rows: list[tuple[int, list[Any], bytes, tuple[float, ...]]],
    grads: dict[bytes, tuple[bool, ...]],
) -> list[StepShape]:
    """``gradwatch.core.structure.signature.shape`` of every row, with the lifecycle of each
    distinct sequence of event kinds computed once and the state carried forward."""
    lifecycles: dict[tuple[tuple[str, str], ...], str] = {}
    state: dict[str, str] = {}
    frozen: tuple[tuple[str, str], ...] = ()
    out = []
    for step, events, key, lr in rows:
        kinds = tuple((str(e[0]), str(e[2]) if len(e) > 2 else "") for e in events)
        life = lifecycles.get(kinds)
        if life is None:
            life = lifecycles[kinds] = lifecycle([(k, 0.0, d) for k, d in kinds])
        if any(k in STATE_KINDS for k, _ in kinds):
            apply_state(state, events)
            frozen = tuple(sorted(state.items()))
        out.append(StepShape(step, life, grads[key], frozen, lr))
    return out


def _matrix(raw: bytes | None, rows: int | None, n: int, dtype: str) -> np.ndarray[Any, Any]:
    """A blob laid out (rows, n); an empty (0, n) one when absent or damaged."""
    if raw is None or not rows:
        return np.zeros((0, n), dtype=dtype)
    flat = np.frombuffer(raw, dtype=dtype)
    if flat.size != rows * n:
        note(f"a blob of {n} steps is stored damaged; its structure is unread")
        return np.zeros((0, n), dtype=dtype)
    return flat.reshape(rows, n)


# ---- a run's timeline ------------------------------------------------------------------


def timeline(read: Read) -> list[dict[str, Any]]:
    """The run's structure changes (info) and dropped safeguards (warnings), by step;
    computed once per read. Only the tensors whose gradient varied can change, so the
    rules see those alone (the others' steps are all alike: no change)."""
    if read.found is not None:
        return read.found
    m = read.member
    out: list[dict[str, Any]] = []
    for o, names in enumerate(m.layout):
        label = f" (optimizer {o})" if len(m.layout) > 1 else ""
        keep = read.varying.get(o, [])
        slim = [
            StepShape(s.step, s.lifecycle, tuple(s.has_grad[j] for j in keep), s.state, s.lr)
            for s in m.shapes.get(o, [])
        ]
        found = changes(slim, [names[j] for j in keep if j < len(names)], label)
        out += [{**f, "optimizer": o} for f in found]
    read.found = sorted(out, key=lambda f: int(f["step"]))
    return read.found


def stored_timeline(session: Session, run: Run) -> list[dict[str, Any]] | None:
    """The structure changes and dropped safeguards the collector stored with the run's
    findings, when its END record says it did (None: derive them from the steps)."""
    end = load_json(run.end_meta) if run.end_meta else None
    if not isinstance(end, dict) or end.get(MARKER) != STORED:
        return None
    query = (
        select(Finding)
        .where(col(Finding.run_id) == run.id, col(Finding.check).in_([CHECK, SAFEGUARD]))
        .order_by(col(Finding.seq), col(Finding.idx))
    )
    out = []
    for f in session.execute(query).scalars():
        details = load_json(f.details)
        out.append(
            {
                "check": f.check,
                "severity": f.severity,
                "step": f.step,
                "optimizer": f.optimizer,
                "param": f.param,
                "message": f.message,
                "hint": f.hint,
                "details": details if isinstance(details, dict) else {},
            }
        )
    return sorted(out, key=lambda f: int(f["step"] or 0))


# ---- a replicate group -----------------------------------------------------------------


@dataclass
class Group:
    """The runs of a group read for its invariants (newest ``MAX_MEMBERS``, oldest first)."""

    key: str
    project_id: int
    reads: list[Read]
    others: int  # runs of the group not read (older than the newest MAX_MEMBERS)

    @property
    def version(self) -> tuple[Any, ...]:
        """What the group's results depend on: its runs read and their versions."""
        runs = tuple((*r.version, r.member.has_error) for r in self.reads)
        return (self.key, self.project_id, self.others, *runs)


def group_of(session: Session, key: str, project_id: int) -> Group:
    """The newest ``MAX_MEMBERS`` runs of group ``key`` in project ``project_id``."""
    query = (
        select(Run)
        .where(in_group(key), col(Run.project_id) == project_id)
        .order_by(col(Run.started_at).desc(), col(Run.id).desc())
    )
    found = list(session.execute(query).scalars())
    newest = sorted(found[:MAX_MEMBERS], key=lambda r: (r.started_at or 0.0, r.id))
    errors = _has_errors(session, [r.id for r in newest])
    reads = [read_run(session, r, r.id in errors) for r in newest]
    return Group(key, project_id, reads, max(len(found) - MAX_MEMBERS, 0))


def _good(m: Member) -> bool:
    return m.key is not None and m.status == "finished" and not m.has_error


def learned_for(group: Group, subject: Member) -> Invariants | None:
    """The invariants ``subject`` is checked against: learned from the group's other good
    runs with its layout, made by another process (None with fewer than two)."""
    if subject.key is None:
        return None
    good = [
        r.member
        for r in group.reads
        if r.member.id != subject.id
        and _good(r.member)
        and r.member.key == subject.key
        and r.member.layout == subject.layout
        and (r.member.process is None or r.member.process != subject.process)
    ]
    return learn(good)


class Memo:
    """The last ``CACHED`` results computed from a group, keyed by what they depend on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def get(self, key: tuple[Any, ...]) -> Any:
        """The result kept for ``key``, or None."""
        with self._lock:
            if key in self._found:
                self._found.move_to_end(key)
                return self._found[key]
            return None

    def put(self, key: tuple[Any, ...], value: Any) -> Any:
        """Keep ``value`` for ``key``; returns it."""
        with self._lock:
            self._found[key] = value
            while len(self._found) > CACHED:
                self._found.popitem(last=False)
        return value


MEMO = Memo()


def breaks(group: Group, read: Read) -> list[dict[str, Any]]:
    """Where the run of ``read`` breaks what held in every other good run of its group
    (computed once per version of the group and the run)."""
    subject = read.member
    key = ("breaks", *read.version, subject.has_error, *group.version)
    found = MEMO.get(key)
    if found is not None:
        return list(found)
    inv = learned_for(group, subject)
    return list(MEMO.put(key, [] if inv is None else check(subject, inv)))


def run_structure(session: Session, run: Run) -> tuple[list[dict[str, Any]], Read]:
    """A run's structure findings: its timeline and where it breaks its group's
    invariants (what ``gradwatch findings`` derives locally), by step."""
    errors = _has_errors(session, [run.id])
    read = read_run(session, run, run.id in errors)
    stored = stored_timeline(session, run)
    found = list(timeline(read)) if stored is None else stored
    key = group_key(run.config_hash, run.code_hash)
    if key is not None and run.code_hash:
        found += breaks(group_of(session, key, run.project_id), read)
    return sorted(found, key=lambda f: int(f["step"])), read


def invariant_texts(inv: Invariants, names: tuple[tuple[str, ...], ...]) -> list[dict[str, Any]]:
    """What held in every good run, one sentence per invariant (its id as the breaks'
    ``details.invariant`` names it)."""
    out: list[dict[str, Any]] = []
    for o, tensors in enumerate(names):
        label = f" (optimizer {o})" if len(names) > 1 else ""
        if o in inv.lifecycles:
            held = " | ".join(f"'{c}'" for c in sorted(inv.lifecycles[o]))
            out.append(
                {
                    "invariant": "lifecycle",
                    "optimizer": o,
                    "text": f"every step{label} after the first was {held}",
                }
            )
        for element, value in sorted(inv.states.get(o, {}).items()):
            out.append(
                {
                    "invariant": f"state:{element}",
                    "optimizer": o,
                    "text": f"{element_text(element)}{label}: '{value or 'none'}' on every step",
                }
            )
        for which, words in (("always", "a gradient on every step"), ("never", "no gradient")):
            picked = [tensors[j] for j in (getattr(inv, which).get(o) or []) if j < len(tensors)]
            if picked:
                verb = "received" if len(picked) == 1 else "each received"
                out.append(
                    {
                        "invariant": f"grads-{which}",
                        "optimizer": o,
                        "text": f"{names_text(picked)}{label} {verb} {words}",
                    }
                )
    return out


def group_structure(group: Group) -> dict[str, Any]:
    """The group's invariants and, for each run read, where it breaks those learned from
    the other good runs. The invariants shown are those of the good runs (with the
    commonest layout) that break none themselves: a replicate that broke one taught
    nothing, so what it broke is listed among them. Computed once per group version."""
    found = MEMO.get(("group", *group.version))
    if found is None:
        found = MEMO.put(("group", *group.version), _group_structure(group))
    return dict(found)


def _group_structure(group: Group) -> dict[str, Any]:
    good = [r.member for r in group.reads if _good(r.member)]
    layouts = [m.layout for m in good]
    common = max(set(layouts), key=layouts.count) if layouts else None
    runs = []
    for r in group.reads:
        m = r.member
        why = None
        if m.key is None:
            why = "its code hash is unknown (not in a git checkout)"
        elif common is not None and m.layout != common:
            why = "its parameter layout differs from the group's"
        elif learned_for(group, m) is None:
            why = "fewer than two other good runs of the group to learn from"
        found = [] if why else breaks(group, r)
        runs.append(
            {
                "id": m.id,
                "name": m.name,
                "status": m.status,
                "good": _good(m),
                "learned_from": False,
                "not_checked": why,
                "truncated": r.truncated,
                "breaks": [
                    {
                        "invariant": str(f["details"]["invariant"]),
                        "step": int(f["step"]),
                        "message": str(f["message"]),
                    }
                    for f in found
                ],
            }
        )
    clean = {row["id"] for row in runs if not row["breaks"]}
    teachers = [m for m in good if m.layout == common and m.id in clean]
    inv = learn(teachers)
    if inv is not None:
        for row in runs:
            row["learned_from"] = row["id"] in {m.id for m in teachers}
    return {
        "key": group.key,
        "learned_from": [m.id for m in teachers] if inv is not None else [],
        "learned_from_names": inv.runs if inv is not None else [],
        "invariants": [] if inv is None else invariant_texts(inv, common or ()),
        "why_none": None
        if inv is not None
        else "fewer than two runs of the group finished with no error finding and break "
        "no invariant",
        "runs": runs,
        "not_read": group.others,
    }


def project_id(session: Session, name: str) -> int | None:
    """The id of project ``name``."""
    return session.execute(
        select(col(Project.id)).where(col(Project.name) == name)
    ).scalar_one_or_none()
