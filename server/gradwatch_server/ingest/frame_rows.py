"""Turns decoded wire frames into rows, validating everything first (no database here).

``parse_frame`` returns a ``FrameRows``: the rows the frame adds (each keyed by run and
seq) and a ``RunDelta`` of what it says about the run. Anything malformed raises
``RequestError(422)`` naming the frame and field, so a batch is all-or-nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradwatch.core.contract import DEFAULT_PROJECT, ROLES, SEVERITIES
from gradwatch.core.records import SCALARS_OPTIMIZER, scalar_masks
from gradwatch.core.records import as_numpy as core_numpy
from gradwatch.core.wire import Array, Frame, Kind, Record
from gradwatch_server.blobcodec import pack
from gradwatch_server.ingest import validate as v
from gradwatch_server.ingest.recordmeta import check_per_step, checked_tensors
from gradwatch_server.ingest.summaries import steps_blob, summary_blobs
from gradwatch_server.jsontext import dump_json
from gradwatch_server.models import (
    INCIDENT_MAX,
    NAME_MAX,
    RUN_ID_MAX,
    Event,
    Finding,
    Fingerprint,
    SeriesBlob,
    SeriesChunk,
)

TEXT_MAX = 4096  # a finding's message or hint: one screen of text at most
PARAM_MAX = 1024  # a finding's parameter (one tensor name, or a few joined)


def meta_text(record: Record) -> str:
    """The JSON text a record's meta is stored as: the text it arrived in when that is
    ASCII (it decodes to the same value: the wire's ``$f``/``$d`` encoding is the one
    ``dump_json`` writes), else ``dump_json`` of the meta. Saves encoding the large
    metas again (a RUN_START's tensor list, a fingerprint: about 0.7 ms of a run's
    first request)."""
    text = record.text
    if text is not None and text.isascii():
        return text
    return dump_json(record.meta)


@dataclass
class RunDelta:
    """What one frame says about its run; merged over a batch with ``merge``."""

    start: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    steps: int | None = None
    last_t: float | None = None
    code_hash: str | None = None

    def merge(self, other: RunDelta) -> None:
        """Fold ``other`` in: maxima for counters and times, first value for the rest."""
        self.start = self.start or other.start
        self.end = self.end or other.end
        self.code_hash = self.code_hash or other.code_hash
        self.steps = _max(self.steps, other.steps)
        self.last_t = _max(self.last_t, other.last_t)


def _max(a: Any, b: Any) -> Any:
    return b if a is None else (a if b is None else max(a, b))


@dataclass
class FrameRows:
    """The rows of one frame, by model class, and its run delta."""

    seq: int
    kind: Kind
    rows: dict[type, list[dict[str, Any]]] = field(default_factory=dict)
    delta: RunDelta = field(default_factory=RunDelta)

    def add(self, model: type, row: dict[str, Any]) -> None:
        """Queue one row of ``model``."""
        self.rows.setdefault(model, []).append(row)


def parse_frame(run_id: str, frame: Frame) -> FrameRows:
    """Validate one frame and build its rows; raises ``RequestError(422)``."""
    kind = frame.record.kind
    where = v.Where(frame.seq, kind.name)
    v.integer(where, "seq", frame.seq, low=1)
    out = FrameRows(frame.seq, kind)
    meta = frame.record.meta
    key = {"run_id": run_id, "seq": frame.seq}
    if kind == Kind.RUN_START:
        out.delta.start = _start(where, run_id, frame.record)
        out.delta.last_t = out.delta.start["started_at"]
    elif kind == Kind.FINGERPRINT:
        phase = v.text(where, "meta.phase", meta.get("phase", ""), max_len=32)
        out.delta.code_hash = v.opt_text(
            where, "meta.code_hash", meta.get("code_hash"), max_len=NAME_MAX
        )
        out.add(Fingerprint, {**key, "phase": phase, "data": meta_text(frame.record)})
    elif kind == Kind.STEPS:
        _steps(where, key, frame.record, out)
    elif kind == Kind.SCALARS:
        _scalars(where, key, frame.record, out)
    elif kind == Kind.FINDINGS:
        findings = meta.get("findings")
        if not isinstance(findings, list):
            raise where.fail("meta.findings", f"must be a list, got {type(findings).__name__}")
        for i, item in enumerate(findings):
            out.add(Finding, {**key, "idx": i, **_finding(where, f"meta.findings[{i}]", item)})
    elif kind == Kind.HEARTBEAT:
        out.delta.last_t = v.opt_finite(where, "meta.t", meta.get("t"))
        out.delta.steps = _max_step(where, meta.get("steps", []))
    elif kind == Kind.END:
        out.delta.end = _end(where, frame.record)
        out.delta.steps = _max_step(where, meta.get("steps", []))
        out.delta.last_t = out.delta.end["ended_at"]
    else:  # EVENTS, NOTICE
        out.add(Event, {**key, "kind": int(kind), "data": meta_text(frame.record)})
    return out


def _start(where: v.Where, run_id: str, record: Record) -> dict[str, Any]:
    meta = record.meta
    claimed = meta.get("run", run_id)
    if claimed != run_id:
        raise where.fail(
            "meta.run", f"is {claimed!r:.80} but the X-Gradwatch-Run header says {run_id!r}"
        )
    return {
        "project": v.text(
            where, "meta.project", meta.get("project") or DEFAULT_PROJECT, max_len=NAME_MAX
        ),
        "name": v.text(where, "meta.name", meta.get("name") or run_id, max_len=NAME_MAX),
        "tags": v.text_list(where, "meta.tags", meta.get("tags", []), max_len=NAME_MAX),
        "config_hash": v.opt_text(
            where, "meta.config_hash", meta.get("config_hash"), max_len=NAME_MAX
        ),
        "started_at": v.finite(where, "meta.started_at", meta.get("started_at", 0.0)),
        "pid": v.opt_integer(where, "meta.pid", meta.get("pid"), low=0),
        "host": v.opt_text(where, "meta.host", meta.get("host"), max_len=NAME_MAX),
        **_ddp(where, meta.get("ddp")),
        "job_id": v.opt_text(where, "meta.job", meta.get("job"), max_len=RUN_ID_MAX),
        "meta": _checked_text(where, record),
    }


def _ddp(where: v.Where, value: Any) -> dict[str, Any]:
    """The rank of a DDP run's stream (all ``None`` for a single-process run)."""
    if value is None:
        return {"group_id": None, "rank": None, "world_size": None}
    ddp = v.mapping(where, "meta.ddp", value)
    world = v.integer(where, "meta.ddp.world_size", ddp.get("world_size"), low=1)
    return {
        "group_id": v.text(where, "meta.ddp.group", ddp.get("group"), max_len=RUN_ID_MAX),
        "rank": v.integer(where, "meta.ddp.rank", ddp.get("rank"), low=0, high=world - 1),
        "world_size": world,
    }


def _checked_text(where: v.Where, record: Record) -> str:
    """A RUN_START's meta text, after checking its tensor list (``checked_tensors``)."""
    checked_tensors(where, record.meta)
    return meta_text(record)


def _end(where: v.Where, record: Record) -> dict[str, Any]:
    meta = record.meta
    return {
        "status": v.text(where, "meta.status", meta.get("status", "finished"), max_len=32),
        "ended_at": v.opt_finite(where, "meta.ended_at", meta.get("ended_at")),
        "meta": meta_text(record),
    }


def _max_step(where: v.Where, steps: Any) -> int | None:
    if not isinstance(steps, list):
        raise where.fail("meta.steps", f"must be a list of integers, got {type(steps).__name__}")
    values = [v.integer(where, f"meta.steps[{i}]", s, low=0) for i, s in enumerate(steps)]
    return max(values, default=None)


def _finding(where: v.Where, name: str, item: Any) -> dict[str, Any]:
    f = v.mapping(where, name, item)
    return {
        "check": v.text(where, f"{name}.check", f.get("check"), max_len=NAME_MAX),
        "severity": v.choice(where, f"{name}.severity", f.get("severity"), SEVERITIES),
        "step": v.opt_integer(where, f"{name}.step", f.get("step"), low=0),
        "optimizer": v.opt_integer(where, f"{name}.optimizer", f.get("optimizer"), low=0),
        "param": v.opt_text(where, f"{name}.param", f.get("param"), max_len=PARAM_MAX),
        "message": v.text(where, f"{name}.message", f.get("message"), max_len=TEXT_MAX),
        "hint": v.text(where, f"{name}.hint", f.get("hint", ""), max_len=TEXT_MAX),
        "source": v.text(where, f"{name}.source", f.get("source", "runtime"), max_len=32),
        "details": dump_json(v.mapping(where, f"{name}.details", f.get("details", {}))),
        "t": dump_json(f.get("t")),
        # the collector's live grouping; ingest regroups the run's findings in step order
        "incident": v.opt_text(where, f"{name}.incident", f.get("incident"), max_len=INCIDENT_MAX),
        "role": None
        if f.get("role") is None
        else v.choice(where, f"{name}.role", f["role"], ROLES),
    }


def as_numpy(where: v.Where, name: str, array: Array) -> np.ndarray[Any, Any]:
    """The array as numpy (a view on the frame's bytes)."""
    return core_numpy(array)


def _column_blobs(
    where: v.Where,
    key: dict[str, Any],
    name: str,
    arr: np.ndarray[Any, Any],
    n: int,
    packed: bool = False,
) -> list[dict[str, Any]]:
    """An ``(n, ...)`` array as blobs laid out ``(columns, n)``: one series per row
    (``packed``: byte planes, see gradwatch_server.blobcodec)."""
    if arr.ndim == 0 or arr.shape[0] != n:
        raise where.fail(
            f"array {name!r}", f"has shape {arr.shape}; its first dimension must be the {n} steps"
        )
    rows = arr.reshape(n, -1).T
    if packed:
        dtype, data = pack(rows)
    else:
        dtype, data = arr.dtype.str.lstrip("<|"), np.ascontiguousarray(rows).tobytes()
    return [{**key, "name": name, "dtype": dtype, "rows": rows.shape[0], "data": data}]


def _step_array(where: v.Where, arrays: dict[str, Array], name: str) -> np.ndarray[Any, Any]:
    array = arrays.get(name)
    if array is None or array.dtype not in ("i8", "i4") or len(array.shape) != 1:
        got = "nothing" if array is None else f"dtype {array.dtype} shape {array.shape}"
        raise where.fail(
            f"array {name!r}", f"must be a 1-d integer array of step numbers, got {got}"
        )
    steps = as_numpy(where, name, array).astype("<i8")
    if steps.size and steps.min() < 0:
        raise where.fail(f"array {name!r}", f"holds step {steps.min()}; steps are 0 or more")
    return steps


def _chunk(
    key: dict[str, Any], optimizer: int, steps: np.ndarray[Any, Any], meta: str
) -> dict[str, Any]:
    return {
        **key,
        "optimizer": optimizer,
        "step_first": int(steps.min()),
        "step_last": int(steps.max()),
        "n": len(steps),
        "steps": steps.tobytes(),
        "meta": meta,
    }


def _steps(where: v.Where, key: dict[str, Any], record: Record, out: FrameRows) -> None:
    meta, arrays = record.meta, record.arrays
    optimizer = v.integer(where, "meta.optimizer", meta.get("optimizer"), low=0, high=1 << 20)
    stat_names = v.text_list(where, "meta.stats", meta.get("stats", []), max_len=64)
    steps = _step_array(where, arrays, "step")
    n = len(steps)
    if n == 0:
        return
    check_per_step(where, meta, n)
    blobs: list[dict[str, Any]] = []
    for name, array in arrays.items():
        if name == "step":
            continue
        v.text(where, f"array name {name!r}", name, max_len=NAME_MAX - 5)
        arr = as_numpy(where, name, array)
        if name != "stats":
            blobs += _column_blobs(where, key, name, arr, n)
            continue
        if arr.ndim != 3 or arr.shape[0] != n or arr.shape[2] != len(stat_names):
            raise where.fail(
                "array 'stats'",
                f"has shape {arr.shape}; expected ({n}, tensors, {len(stat_names)}) "
                f"for stats {stat_names}",
            )
        for s, stat in enumerate(stat_names):
            blobs += _column_blobs(where, key, f"stat:{stat}", arr[:, :, s], n, packed=True)
            blobs += summary_blobs(key, stat, arr[:, :, s].T, steps)
        blobs.append(steps_blob(key, steps))
    rest = {k: val for k, val in meta.items() if k not in ("optimizer", "stats")}
    out.add(SeriesChunk, _chunk(key, optimizer, steps, dump_json(rest)))
    for blob in blobs:
        out.add(SeriesBlob, blob)
    out.delta.steps = int(steps.max()) if optimizer == 0 else None


def _scalars(where: v.Where, key: dict[str, Any], record: Record, out: FrameRows) -> None:
    meta, arrays = record.meta, record.arrays
    keys = v.text_list(where, "meta.keys", meta.get("keys", []), max_len=NAME_MAX - 8)
    steps = _step_array(where, arrays, "step")
    n = len(steps)
    index, values = arrays.get("key"), arrays.get("value")
    if index is None or values is None or index.shape != (n,) or values.shape != (n,):
        raise where.fail("arrays", f"'key' and 'value' must be 1-d arrays of the {n} steps")
    idx = as_numpy(where, "key", index)
    if index.dtype not in ("i4", "i8", "u1") or (n and (idx.min() < 0 or idx.max() >= len(keys))):
        raise where.fail("array 'key'", f"must hold integer indices into the {len(keys)} keys")
    if values.dtype not in ("f8", "f4"):
        raise where.fail("array 'value'", f"must be float, got {values.dtype}")
    if n == 0:
        return
    out.add(SeriesChunk, _chunk(key, SCALARS_OPTIMIZER, steps, dump_json({"keys": keys})))
    vals = as_numpy(where, "value", values).astype("<f8")
    for name, mask in scalar_masks(keys, idx).items():
        present = np.where(mask, vals, 0.0)
        out.add(SeriesBlob, _column_blobs(where, key, f"scalar:{name}", present, n)[0])
        out.add(SeriesBlob, _column_blobs(where, key, f"has:{name}", mask.astype("u1"), n)[0])
