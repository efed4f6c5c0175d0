"""Per-tensor statistics of one optimizer step, computed on the device with fused ops.

*What* is computed lives here; *when* is decided by :mod:`gradwatch.lifecycle` and *how
it is stored* by :mod:`gradwatch.transfer`. Nothing here reads a value back to the host
for a tensor on an accelerator: results stay on the device until the batched transfer.

Columns of a step's ``(T, 4)`` float64 matrix, one row per parameter tensor:

* ``grad_norm``      ‖g‖₂ (0 where the tensor has no gradient; see ``has_grad``)
* ``param_norm``     ‖θ‖₂ after the step
* ``update_norm``    ‖θ_after − θ_before‖₂, exact (from a snapshot taken before the step)
* ``nonfinite_grad`` number of NaN/±Inf elements of g
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

STAT_NAMES: tuple[str, ...] = ("grad_norm", "param_norm", "update_norm", "nonfinite_grad")
GRAD, PARAM, UPDATE, NONFINITE = range(4)
_CHUNK_BYTES = 256 << 20  # bounds the temporary memory of the on-device non-finite count


def _acc_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


_INDEX_CACHE: dict[tuple[torch.device, tuple[int, ...]], torch.Tensor] = {}


def index_tensor(idx: Sequence[int], device: torch.device) -> torch.Tensor:
    """A cached index tensor on ``device``: creating one from a list is a blocking
    host-to-device copy, so each distinct index set is uploaded once."""
    key = (device, tuple(idx))
    found = _INDEX_CACHE.get(key)
    if found is None:
        if len(_INDEX_CACHE) > 256:
            _INDEX_CACHE.clear()
        found = _INDEX_CACHE[key] = torch.tensor(key[1], dtype=torch.long, device=device)
    return found


def uniform_dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype | None:
    """The accumulation dtype when every tensor shares one device and one accumulation
    dtype (the common case, which then needs no grouping), else ``None``."""
    kinds = {(t.device, _acc_dtype(t)) for t in tensors}
    return next(iter(kinds))[1] if len(kinds) == 1 else None


def fused_norms(
    tensors: Sequence[torch.Tensor],
    out_device: torch.device,
    order: float = 2.0,
    uniform: torch.dtype | None = None,
) -> torch.Tensor:
    """Norms of ``tensors`` as one float64 vector on ``out_device``, with ``_foreach_norm``.

    Tensors are grouped by (device, accumulation dtype) because the fused kernel and
    ``stack`` need one of each; low-precision tensors accumulate in float32. ``uniform``
    (from :func:`uniform_dtype`, computed once) skips the grouping.
    """
    if not tensors:
        return torch.zeros(0, dtype=torch.float64, device=out_device)
    if uniform is not None:
        norms = torch._foreach_norm(list(tensors), order, dtype=uniform)
        return torch.stack(norms).to(device=out_device, dtype=torch.float64)
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, _acc_dtype(t)), []).append(i)
    if len(groups) == 1:
        ((_device, dtype),) = groups
        norms = torch._foreach_norm(list(tensors), order, dtype=dtype)
        return torch.stack(norms).to(device=out_device, dtype=torch.float64)
    out = torch.empty(len(tensors), dtype=torch.float64, device=out_device)
    for (_device, dtype), idx in groups.items():
        norms = torch._foreach_norm([tensors[i] for i in idx], order, dtype=dtype)
        vals = torch.stack(norms).to(device=out_device, dtype=torch.float64)
        out.index_copy_(0, index_tensor(idx, out_device), vals)
    return out


def nonfinite_counts(tensors: Sequence[torch.Tensor], out_device: torch.device) -> torch.Tensor:
    """Count NaN/±Inf elements per tensor on the device: ``x*0`` is 0 exactly where ``x`` is
    finite, so its L0 "norm" counts the non-finite elements. Chunked to bound the temporary."""
    parts: list[torch.Tensor] = []
    chunk: list[torch.Tensor] = []
    size = 0
    for t in tensors:
        chunk.append(t)
        size += t.numel() * t.element_size()
        if size >= _CHUNK_BYTES:
            parts.append(fused_norms(torch._foreach_mul(chunk, 0.0), out_device, 0.0))
            chunk, size = [], 0
    if chunk or not parts:
        parts.append(fused_norms(torch._foreach_mul(chunk, 0.0), out_device, 0.0))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def host_nonfinite_counts(tensors: Sequence[torch.Tensor], norms: torch.Tensor) -> torch.Tensor:
    """CPU path: the values are already on the host, so count exactly, but only in the
    tensors whose norm is not finite (the count is 0 wherever the norm is finite)."""
    if math.isfinite(float(norms.sum())):  # norms are ≥ 0: a finite sum means all finite
        return _zeros(len(tensors))
    counts = torch.zeros(len(tensors), dtype=torch.float64)
    for i in torch.nonzero(~torch.isfinite(norms)).flatten().tolist():
        counts[i] = float((~torch.isfinite(tensors[i])).sum())
    return counts


_ZEROS: dict[int, torch.Tensor] = {}


def _zeros(n: int) -> torch.Tensor:
    """A shared read-only zero vector (callers copy it, never write to it)."""
    found = _ZEROS.get(n)
    if found is None:
        found = _ZEROS[n] = torch.zeros(n, dtype=torch.float64)
    return found


@dataclass
class PreStep:
    """What ``before_step`` measured, waiting for the parameters to change."""

    grad_norm: torch.Tensor
    nonfinite: torch.Tensor
    has_grad: list[bool]


class StepStats:
    """Computes the per-tensor statistics of one optimizer's parameters around ``step()``."""

    def __init__(self, params: Sequence[torch.Tensor], device: torch.device) -> None:
        self.params = list(params)
        self.device = device
        self._uniform = uniform_dtype(self.params)
        self._on_host = device.type == "cpu" and all(p.device.type == "cpu" for p in self.params)
        self._snapshot: list[torch.Tensor] | None = None

    @torch.no_grad()
    def before_step(self) -> PreStep:
        """Gradient norms and non-finite counts, and a snapshot of θ for the exact update."""
        present = [i for i, p in enumerate(self.params) if p.grad is not None]
        grads = [g for g in (self.params[i].grad for i in present) if g is not None]
        uniform = self._uniform if len(grads) == len(self.params) else None
        norms = fused_norms(grads, self.device, uniform=uniform)
        counts = self._counts(grads, norms)
        grad_norm, nonfinite = norms, counts
        if len(present) != len(self.params):
            idx = index_tensor(present, self.device)
            grad_norm = torch.zeros(len(self.params), dtype=torch.float64, device=self.device)
            nonfinite = torch.zeros_like(grad_norm)
            grad_norm.index_copy_(0, idx, norms)
            nonfinite.index_copy_(0, idx, counts)
        self._take_snapshot()
        has_grad = [False] * len(self.params)
        for i in present:
            has_grad[i] = True
        return PreStep(grad_norm=grad_norm, nonfinite=nonfinite, has_grad=has_grad)

    @torch.no_grad()
    def after_step(self, pre: PreStep) -> torch.Tensor:
        """The ``(T, 4)`` float64 matrix of this step, still on the device."""
        params = self.params  # under no_grad: no detach needed
        param_norm = fused_norms(params, self.device, uniform=self._uniform)
        if self._snapshot is None:
            update = torch.full_like(param_norm, float("nan"))
        else:
            torch._foreach_sub_(self._snapshot, params)
            update = fused_norms(self._snapshot, self.device, uniform=self._uniform)
        return torch.stack([pre.grad_norm, param_norm, update, pre.nonfinite], dim=1)

    def release(self) -> None:
        """Free the snapshot (the only memory proportional to the model that is kept)."""
        self._snapshot = None

    def _counts(self, grads: list[torch.Tensor], norms: torch.Tensor) -> torch.Tensor:
        if self._on_host:
            return host_nonfinite_counts(grads, norms)
        return nonfinite_counts(grads, self.device)

    def _take_snapshot(self) -> None:
        if self._snapshot is None:
            self._snapshot = [p.detach().clone() for p in self.params]
        else:
            torch._foreach_copy_(self._snapshot, self.params)
