"""Builds the wire records of a run (schema in :mod:`gradwatch.wire`).

Each builder runs on the I/O thread where it can: turning device results into bytes
happens there, after the batched transfer, never on the training thread.
"""

from __future__ import annotations

import ctypes
import hashlib
import struct
from collections.abc import Sequence

import torch

from gradwatch.hooks.optimizer import StepMeta
from gradwatch.stats.rows import LEADING
from gradwatch.stats.tensors import STAT_NAMES
from gradwatch.wire import Array, Kind, Record

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
    return Record(
        kind=Kind.STEPS,
        meta={
            "optimizer": optimizer,
            "stats": list(STAT_NAMES),
            "events": [[list(e) for e in m.events] for m in metas],
            "batch_hash": hashes,
            "batch_signature": [m.batch for m in metas],
        },
        arrays={
            "step": tensor_array(torch.tensor([m.step for m in metas], dtype=torch.int64)),
            "loss": tensor_array(data[:, 0]),
            "has_loss": tensor_array(torch.tensor([m.has_loss for m in metas], dtype=torch.uint8)),
            "batch": tensor_array(batch),
            "stats": tensor_array(stats),
            "has_grad": tensor_array(
                torch.tensor([m.has_grad for m in metas], dtype=torch.uint8).reshape(n, n_tensors)
            ),
            "lr": tensor_array(torch.tensor(lr, dtype=torch.float64).reshape(n, lr_width)),
            "n_backward": tensor_array(
                torch.tensor([m.n_backward for m in metas], dtype=torch.int32)
            ),
            "wall_time": tensor_array(
                torch.tensor([m.wall_time for m in metas], dtype=torch.float64)
            ),
            "phases": tensor_array(
                torch.tensor([m.phases for m in metas], dtype=torch.float64).reshape(n, 3)
            ),
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
    return Record(
        kind=Kind.SCALARS,
        meta={"keys": list(keys)},
        arrays={
            "step": tensor_array(torch.tensor(steps, dtype=torch.int64)),
            "key": tensor_array(torch.tensor(idx, dtype=torch.int32)),
            "value": tensor_array(torch.tensor(values, dtype=torch.float64)),
        },
    )
