"""The one decoder of a run's records: what each record kind means, decided once.

Every reader of spooled or stored records goes through this module: the local reader
(:mod:`gradwatch.core.local_reader`), the pandas reader's local source
(:mod:`gradwatch.analysis.local`), ``gradwatch findings`` and the server's ingest (which
validates each frame first, then files the same layout). What it decides:

- ``RUN_START`` and ``END``: the run's start and end records (the last one of each).
- ``FINGERPRINT``: records merged by :func:`merge_fingerprints`, the one merge rule: the
  fast phase first, then the slow one, each in ``seq`` order, a later key replacing an
  earlier one, ``phase`` itself left out.
- ``STEPS``: per optimizer, :class:`StepsChunk` in the layout the server stores: the steps,
  and one ``(rows, n)`` float64 matrix per array (``stat:<name>`` per statistic, one row
  per tensor).
- ``SCALARS``: :class:`ScalarsChunk`: per key the values and a presence row
  (:func:`scalar_masks`).
- ``FINDINGS``: the findings, in the order they were stored.

Example::

    from gradwatch.core.spool import read_spool
    run = decode(read_spool(run_dir).frames)
    run.fingerprint["seeds"], [c.steps for c in run.steps[0]]
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gradwatch.core.wire import Array, Frame, Kind, Record

#: the optimizer number user scalars are filed under
SCALARS_OPTIMIZER = -1
#: wire dtype -> numpy dtype
NUMPY_DTYPES = {"f8": "<f8", "f4": "<f4", "i8": "<i8", "i4": "<i4", "u1": "u1"}

Vector = NDArray[Any]


def as_numpy(array: Array) -> Vector:
    """A wire array as numpy (a view on its bytes)."""
    return np.frombuffer(array.data, dtype=NUMPY_DTYPES[array.dtype]).reshape(array.shape)


def tensor_rows(
    start_meta: dict[str, Any], note: Callable[[str], None] = lambda problem: None
) -> dict[str, tuple[int, int]]:
    """Tensor name -> (optimizer, row in that optimizer's statistics), from RUN_START;
    what cannot be read is passed to ``note`` (the server reports it as a problem)."""
    out: dict[str, tuple[int, int]] = {}
    counts: dict[int, int] = {}
    tensors = start_meta.get("tensors", []) if isinstance(start_meta, dict) else None
    if not isinstance(tensors, list):
        note(f"the run's start record has tensors of type {type(tensors).__name__}, not a list")
        return out
    for i, tensor in enumerate(tensors):
        opt = tensor.get("optimizer", 0) if isinstance(tensor, dict) else None
        if not isinstance(opt, int) or isinstance(opt, bool):
            note(f"tensor {i} of the run's start record is unreadable; its rows are left out")
            return out  # rows after it cannot be placed
        row = counts.get(opt, 0)
        counts[opt] = row + 1
        out.setdefault(str(tensor.get("name")), (opt, row))
    return out


def fingerprint_order(phase: str, seq: int) -> tuple[bool, int]:
    """Where a FINGERPRINT record of ``phase`` and ``seq`` goes in the merge: fast first."""
    return (phase != "fast", seq)


def merge_fingerprints(parts: Iterable[tuple[str, int, Mapping[str, Any]]]) -> dict[str, Any]:
    """The run's fingerprint from its FINGERPRINT records ``(phase, seq, meta)``: merged in
    :func:`fingerprint_order`, a later key replacing an earlier one, without ``phase``."""
    merged: dict[str, Any] = {}
    for _, _, meta in sorted(parts, key=lambda p: fingerprint_order(p[0], p[1])):
        merged.update({k: v for k, v in meta.items() if k != "phase"})
    return merged


def scalar_masks(keys: list[str], index: Vector) -> dict[str, NDArray[np.bool_]]:
    """Per distinct key of a SCALARS record (first-logged order), which of its points hold
    that key (``index``: the record's ``key`` array)."""
    return {
        name: np.isin(index, [i for i, k in enumerate(keys) if k == name])
        for name in dict.fromkeys(keys)
    }


@dataclass
class StepsChunk:
    """One STEPS record: its steps, its arrays as ``(rows, n)`` float64 matrices (the
    statistics as one ``stat:<name>`` matrix each, a row per tensor), and per step the
    lifecycle events and the batch hash."""

    optimizer: int
    steps: Vector
    blobs: dict[str, Vector]
    stats: list[str]
    events: list[list[Any]] = field(default_factory=list)
    batch_hash: list[str | None] = field(default_factory=list)


@dataclass
class ScalarsChunk:
    """One SCALARS record: per point its step, key index and value; ``blobs`` files them as
    the server does (``scalar:<key>``: the value or 0, ``has:<key>``: 1 where present)."""

    keys: list[str]
    steps: Vector
    index: Vector
    values: Vector
    blobs: dict[str, Vector]

    def points(self) -> list[tuple[int, str, float]]:
        """``(step, key, value)`` per logged point, in record order."""
        return [
            (int(s), self.keys[int(k)], float(v))
            for s, k, v in zip(
                self.steps.tolist(), self.index.tolist(), self.values.tolist(), strict=True
            )
        ]


def steps_chunk(record: Record) -> StepsChunk:
    """A STEPS record decoded."""
    steps = as_numpy(record.arrays["step"]).astype(np.int64)
    n = len(steps)
    stats: list[str] = list(record.meta.get("stats", []))
    blobs: dict[str, Vector] = {}
    for name, array in record.arrays.items():
        if name == "step":
            continue
        arr = as_numpy(array)
        if name == "stats":
            for s, stat in enumerate(stats):
                blobs[f"stat:{stat}"] = arr[:, :, s].T.astype(np.float64)
        else:
            blobs[name] = arr.reshape(n, -1).T.astype(np.float64)
    return StepsChunk(
        int(record.meta["optimizer"]),
        steps,
        blobs,
        stats,
        list(record.meta.get("events", [])),
        list(record.meta.get("batch_hash", [])),
    )


def scalars_chunk(record: Record) -> ScalarsChunk:
    """A SCALARS record decoded."""
    keys: list[str] = list(record.meta.get("keys", []))
    steps = as_numpy(record.arrays["step"]).astype(np.int64)
    index = as_numpy(record.arrays["key"])
    values = as_numpy(record.arrays["value"]).astype(np.float64)
    blobs: dict[str, Vector] = {}
    for name, mask in scalar_masks(keys, index).items():
        blobs[f"scalar:{name}"] = np.where(mask, values, 0.0).reshape(1, -1)
        blobs[f"has:{name}"] = mask.astype(np.float64).reshape(1, -1)
    return ScalarsChunk(keys, steps, index, values, blobs)


def findings_of(record: Record) -> list[dict[str, Any]]:
    """The findings a FINDINGS record carries."""
    found: list[dict[str, Any]] = record.meta.get("findings", [])
    return found


@dataclass
class RunRecords:
    """Everything a run's records say, decoded by :func:`decode`."""

    start: dict[str, Any] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: optimizer -> its STEPS chunks in record order (empty records left out; an optimizer
    #: seen only in empty records has an empty list)
    steps: dict[int, list[StepsChunk]] = field(default_factory=dict)
    scalars: list[ScalarsChunk] = field(default_factory=list)
    #: keys logged with ``run.log``, in first-logged order
    scalar_keys: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0


def decode(frames: Iterable[Frame], only: Collection[Kind] | None = None) -> RunRecords:
    """Decode a run's frames (in ``seq`` order, as the spool or the server holds them);
    ``only``: decode records of these kinds only (``records`` still counts every frame)."""
    run = RunRecords()
    prints: list[tuple[str, int, Mapping[str, Any]]] = []
    keys: dict[str, None] = {}
    for frame in frames:
        run.records += 1
        rec = frame.record
        if only is not None and rec.kind not in only:
            continue
        if rec.kind == Kind.RUN_START:
            run.start = rec.meta
        elif rec.kind == Kind.FINGERPRINT:
            prints.append((str(rec.meta.get("phase", "")), frame.seq, rec.meta))
        elif rec.kind == Kind.STEPS:
            chunks = run.steps.setdefault(int(rec.meta["optimizer"]), [])
            if len(rec.arrays["step"].data):
                chunks.append(steps_chunk(rec))
        elif rec.kind == Kind.SCALARS:
            if len(rec.arrays["step"].data):
                keys.update(dict.fromkeys(rec.meta.get("keys", [])))
                run.scalars.append(scalars_chunk(rec))
        elif rec.kind == Kind.FINDINGS:
            run.findings += findings_of(rec)
        elif rec.kind == Kind.END:
            run.end = rec.meta
    run.fingerprint = merge_fingerprints(prints)
    run.scalar_keys = list(keys)
    return run
