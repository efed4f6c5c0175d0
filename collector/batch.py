"""A cheap, position-sensitive checksum of the batch the model received (data-order diagnosis).

Per input tensor ``x`` with batch size ``n`` (first dimension): the per-sample sums
``r_i`` (accumulated in float32 for floating inputs, float64 for integer ones such as token
ids: no widened copy of the batch), then the float64 pair ``(Σ r_i, Σ (i+1)·r_i)`` as one
small matrix product. Swapping two samples, replacing one, or a different augmentation
changes the pair; the same samples in the same order give bit-identical values on the same
device. Shapes and dtypes are kept on the host and hashed with the values later.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

_MAX_TENSORS = 32
_MAX_DEPTH = 4


def _tensors(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < _MAX_DEPTH and isinstance(obj, tuple | list):
        for item in obj:
            yield from _tensors(item, depth + 1)
    elif depth < _MAX_DEPTH and isinstance(obj, dict):
        for key in sorted(obj, key=str):
            yield from _tensors(obj[key], depth + 1)


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """Host-side description of the inputs: ``"float32[64,3,32,32]"`` per tensor."""
    found = list(_tensors((args, kwargs)))[:_MAX_TENSORS]
    return [f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in found]


@torch.no_grad()
def checksum(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The ``(2,)`` float64 checksum of every tensor in the inputs, on their device.

    Returns ``None`` when the inputs hold no tensor. Computed with device ops only.
    """
    total: torch.Tensor | None = None
    for j, t in enumerate(list(_tensors((args, kwargs)))[:_MAX_TENSORS]):
        x = t.detach()
        if x.is_complex():
            x = torch.view_as_real(x)
        if x.dtype == torch.bool:
            x = x.to(torch.uint8)
        rows = x.reshape(x.shape[0], -1) if x.dim() > 0 else x.reshape(1, 1)
        acc = (
            torch.float64
            if x.dtype == torch.float64 or not x.is_floating_point()
            else (torch.float32)
        )
        per_sample = rows.sum(dim=1, dtype=acc).to(torch.float64)
        pair = _weights(per_sample.numel(), x.device, j + 1) @ per_sample
        total = pair if total is None else total + pair.to(total.device)
    return total


_WEIGHTS: dict[tuple[int, torch.device, int], torch.Tensor] = {}


def _weights(n: int, device: torch.device, scale: int) -> torch.Tensor:
    """The cached ``(2, n)`` matrix ``scale·[1…1; 1…n]`` (built on the device once)."""
    key = (n, device, scale)
    found = _WEIGHTS.get(key)
    if found is None:
        if len(_WEIGHTS) > 64:
            _WEIGHTS.clear()
        ramp = torch.arange(1, n + 1, dtype=torch.float64, device=device)
        found = _WEIGHTS[key] = torch.stack([torch.ones_like(ramp), ramp]) * scale
    return found
