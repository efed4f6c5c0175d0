"""Builds the wire records of a run: framing in :mod:`gradwatch.core.wire`, the payload of each
record kind typed in :mod:`gradwatch.core.contract` (every record the collector writes is made
here, so the contract is checked by mypy where records are made).

Each builder runs on the I/O thread where it can: turning device results into bytes
happens there, after the batched transfer, never on the training thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch

from gradwatch.checks.view import Event
from gradwatch.core.contract import (
    STAT_NAMES,
    EndMeta,
    FindingsMeta,
    FingerprintPhase,
    HeartbeatMeta,
    NoticeMeta,
    RunStartMeta,
    ScalarsMeta,
    StepsMeta,
)
from gradwatch.core.wire import Array, Kind, Record
from gradwatch.stats.batch_checksum import Deferred
from gradwatch.stats.rows import LEADING


@dataclass
class StepMeta:
    """Host-side facts of one optimizer step (the device side is its transfer row)."""

    step: int
    n_backward: int
    lr: list[float]
    wall_time: float
    phases: tuple[float, float, float]  # forward, backward, step seconds (host clock)
    events: list[Event]
    has_grad: list[bool]
    has_loss: bool
    batch: list[str]
    requires_grad: list[bool] | None = None  # as at this step (checks run later)
    #: each forward's input checksum apart, when the step had two or more (repeated-batch)
    inputs: list[torch.Tensor | Deferred] | None = None
    #: the run's step counter at this step (what DataLoader batches are stamped with)
    clock: int = 0


_DTYPES = {
    torch.float64: "f8",
    torch.float32: "f4",
    torch.int64: "i8",
    torch.int32: "i4",
    torch.uint8: "u1",
}


def tensor_array(t: torch.Tensor) -> Array:
    """A CPU tensor as a wire array (raw little-endian bytes, no numpy needed)."""
    t = t.detach().contiguous()
    nbytes = t.numel() * t.element_size()
    data = ctypes.string_at(t.data_ptr(), nbytes) if nbytes else b""
    return Array.from_buffer(_DTYPES[t.dtype], tuple(t.shape), data)


def batch_hash(pair: Sequence[float], signature: Sequence[str]) -> str:
    """16 hex digits naming the batch: the exact checksum bits plus shapes and dtypes."""
    h = hashlib.sha256(struct.pack("<2d", *pair))
    h.update("|".join(signature).encode())
    return h.hexdigest()[:16]


def steps_record(
    optimizer: int, n_tensors: int, data: torch.Tensor, metas: Sequence[StepMeta]
) -> Record:
    """One STEPS record: ``data`` is the ``(n, LEADING + 4T)`` host matrix of the window
    (statistics stat-major in each row; the wire holds them as ``(n, T, 4)``)."""
    n = len(metas)
    stats = data[:, LEADING:].reshape(n, len(STAT_NAMES), n_tensors).transpose(1, 2)
    batch = data[:, 1:3]
    has_batch = [bool(m.batch) for m in metas]
    hashes = [
        batch_hash(pair, m.batch) if ok else None
        for pair, m, ok in zip(batch.tolist(), metas, has_batch, strict=True)
    ]
    lr_width = max((len(m.lr) for m in metas), default=0)
    lr = [m.lr + [float("nan")] * (lr_width - len(m.lr)) for m in metas]
    meta: StepsMeta = {
        "optimizer": optimizer,
        "stats": list(STAT_NAMES),
        "events": [[list(e) for e in m.events] for m in metas],
        "batch_hash": hashes,
        "batch_signature": [m.batch for m in metas],
    }
    return Record(
        kind=Kind.STEPS,
        meta=_plain(meta),
        arrays={
            "step": Array.from_values("i8", [m.step for m in metas]),
            "loss": tensor_array(data[:, 0]),
            "has_loss": Array.from_values("u1", [m.has_loss for m in metas]),
            "batch": tensor_array(batch),
            "stats": tensor_array(stats),
            "has_grad": Array.from_values(
                "u1", [x for m in metas for x in m.has_grad], (n, n_tensors)
            ),
            "lr": Array.from_values("f8", [x for row in lr for x in row], (n, lr_width)),
            "n_backward": Array.from_values("i4", [m.n_backward for m in metas]),
            "wall_time": Array.from_values("f8", [m.wall_time for m in metas]),
            "phases": Array.from_values("f8", [x for m in metas for x in m.phases], (n, 3)),
        },
    )


def scalars_record(entries: Sequence[tuple[int, str, float | torch.Tensor]]) -> Record:
    """User scalars from ``run.log``: parallel arrays of step, key index and value."""
    keys: dict[str, int] = {}
    steps, idx, values = [], [], []
    for step, key, value in entries:
        steps.append(step)
        idx.append(keys.setdefault(key, len(keys)))
        values.append(float(value))
    meta: ScalarsMeta = {"keys": list(keys)}
    return Record(
        kind=Kind.SCALARS,
        meta=_plain(meta),
        arrays={
            "step": tensor_array(torch.tensor(steps, dtype=torch.int64)),
            "key": tensor_array(torch.tensor(idx, dtype=torch.int32)),
            "value": tensor_array(torch.tensor(values, dtype=torch.float64)),
        },
    )


def _plain(meta: Any) -> dict[str, Any]:
    """A typed payload as the record's ``meta`` (the same dict: no copy, same key order)."""
    return cast(dict[str, Any], meta)


def run_start_record(meta: RunStartMeta) -> Record:
    """RUN_START, the first record of a run."""
    return Record(Kind.RUN_START, _plain(meta))


def fingerprint_record(phase: FingerprintPhase, sections: dict[str, Any]) -> Record:
    """FINGERPRINT: the fast part at start, the slow part (git, packages) later."""
    return Record(Kind.FINGERPRINT, {"phase": phase, **sections})


def findings_record(meta: FindingsMeta) -> Record:
    """FINDINGS: the findings stored since the last such record."""
    return Record(Kind.FINDINGS, _plain(meta))


def heartbeat_record(meta: HeartbeatMeta) -> Record:
    """HEARTBEAT: the run is alive (every few seconds of training)."""
    return Record(Kind.HEARTBEAT, _plain(meta))


def end_record(meta: EndMeta) -> Record:
    """END, the last record of a run that closed."""
    return Record(Kind.END, _plain(meta))


def notice_record(meta: NoticeMeta) -> Record:
    """NOTICE: something about the collection itself."""
    return Record(Kind.NOTICE, _plain(meta))
