"""Rows of collected steps: ``[loss, batch checksum (2), Σ|x| of the batch, 4·T statistics]``
in float64.

On an accelerator each step writes its row in place in the device buffer of
:mod:`gradwatch.stats.transfer`. On the CPU the training thread only keeps what it computed
(:class:`HostStep`: a few small tensors) and the I/O thread lays a window of them out as
rows (:func:`assemble`), so that the step itself runs no copy or layout op at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradwatch.stats.batch_checksum import Deferred
from gradwatch.stats.tensors import StepValues

LEADING = 4  # loss, batch checksum (2), Σ|x|: the columns before the 4·T statistics
BATCH_ABS = 3  # the column of Σ|x| over the batch's floating-point inputs


@dataclass
class HostStep:
    """What one CPU step left for its row."""

    values: StepValues
    loss: torch.Tensor | None
    batch: torch.Tensor | Deferred | None  # a Deferred checksum is computed here, off-thread


def write_row(
    row: torch.Tensor,
    values: StepValues,
    loss: torch.Tensor | None,
    batch: torch.Tensor | None,
    zeroed: bool,
) -> None:
    """Write one step into ``row`` (``zeroed``: it holds zeros already)."""
    if not zeroed:
        row[:LEADING].zero_()
    if loss is not None:
        row[0].copy_(loss.reshape(()))
    if batch is not None:
        row[1:LEADING].copy_(batch)
    values.write(row[LEADING:], zeroed)


def assemble(steps: Sequence[HostStep], n_tensors: int) -> torch.Tensor:
    """The ``(len(steps), LEADING + 4·T)`` float64 rows of a window of CPU steps."""
    data = torch.zeros((len(steps), LEADING + 4 * n_tensors), dtype=torch.float64)
    if not steps:
        return data
    lossy = [i for i, s in enumerate(steps) if s.loss is not None]
    if lossy:
        losses = [s.loss for s in steps if s.loss is not None]
        data[lossy, 0] = _losses(losses)
    batched = [i for i, s in enumerate(steps) if s.batch is not None]
    if batched:
        data[batched, 1:LEADING] = checksums([s.batch for s in steps if s.batch is not None])
    by_layout: dict[tuple[int, int, torch.dtype], list[int]] = {}
    for i, s in enumerate(steps):
        key = (s.values.first, s.values.norms.numel(), s.values.norms.dtype)
        by_layout.setdefault(key, []).append(i)
    for (first, _numel, _dtype), idx in by_layout.items():
        start = LEADING + first * n_tensors
        norms = torch.stack([steps[i].values.norms for i in idx])
        data[idx, start : LEADING + 3 * n_tensors] = norms.to(torch.float64)
    measured = [i for i, s in enumerate(steps) if s.values.grad_norm is not None]
    if measured:  # gradient norms measured before the update
        grads = [g for g in (s.values.grad_norm for s in steps) if g is not None]
        data[measured, LEADING : LEADING + n_tensors] = _stacked(grads)
    for i, s in enumerate(steps):
        if s.values.nonfinite is not None:
            data[i, LEADING + 3 * n_tensors :] = s.values.nonfinite
    return data


def checksums(items: Sequence[torch.Tensor | Deferred]) -> torch.Tensor:
    """The ``(len(items), WIDTH)`` float64 batch checksums of a window of steps (each taken
    at once or :class:`Deferred`), bit for bit ``batch_checksum.resolve`` of each, with
    ``Σ|x|`` added for the whole window in one op instead of one per step."""
    pairs: list[torch.Tensor] = []
    scaled: list[int] = []
    scales: list[torch.Tensor] = []
    for i, item in enumerate(items):
        if isinstance(item, Deferred):
            pair, scale = item.split()
            if scale is not None:
                scaled.append(i)
                scales.append(scale)
            pairs.append(pair)
        else:
            pairs.append(item)
    out = _stacked(pairs)
    if scales:
        column = _stacked(scales)
        if len(scaled) == len(items):
            out[:, 2].add_(column)
        else:
            out[scaled, 2] += column
    return out


def _stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
    """CPU tensors of one shape as one float64 tensor (one op when they share a dtype)."""
    if all(t.dtype == tensors[0].dtype for t in tensors):
        return torch.stack(tensors).to(torch.float64)
    return torch.stack([t.to(torch.float64) for t in tensors])


def _losses(losses: list[torch.Tensor]) -> torch.Tensor:
    """One-element loss tensors as a float64 vector."""
    if all(t.shape == losses[0].shape for t in losses):
        return _stacked(losses).reshape(len(losses))
    return torch.tensor([float(t) for t in losses], dtype=torch.float64)
