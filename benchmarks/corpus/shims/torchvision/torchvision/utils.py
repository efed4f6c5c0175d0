"""make_grid and save_image (a PNG through torchvision.io)."""

from __future__ import annotations

import math

import torch

from torchvision.io import write_png


def make_grid(
    tensor,
    nrow: int = 8,
    padding: int = 2,
    normalize: bool = False,
    value_range=None,
    scale_each: bool = False,
    pad_value: float = 0.0,
    **kwargs,
):
    """Tile a BxCxHxW batch (or a list of CxHxW images) into one CxH'xW' image."""
    if "range" in kwargs:
        value_range = kwargs.pop("range")
    if isinstance(tensor, list):
        tensor = torch.stack(tensor, dim=0)
    tensor = tensor.detach()
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(0)
    if tensor.dim() == 3:
        tensor = tensor.unsqueeze(0) if tensor.size(0) in (1, 3) else tensor.unsqueeze(1)
    if tensor.size(1) == 1:
        tensor = torch.cat((tensor, tensor, tensor), 1)
    if normalize:
        tensor = tensor.clone()

        def norm(t, lo, hi):
            t.clamp_(min=lo, max=hi).sub_(lo).div_(max(hi - lo, 1e-5))

        if scale_each:
            for t in tensor:
                lo, hi = value_range or (float(t.min()), float(t.max()))
                norm(t, lo, hi)
        else:
            lo, hi = value_range or (float(tensor.min()), float(tensor.max()))
            norm(tensor, lo, hi)
    n = tensor.size(0)
    xmaps = min(nrow, n)
    ymaps = math.ceil(n / xmaps)
    h, w = tensor.size(2) + padding, tensor.size(3) + padding
    grid = tensor.new_full((tensor.size(1), h * ymaps + padding, w * xmaps + padding), pad_value)
    k = 0
    for y in range(ymaps):
        for x in range(xmaps):
            if k >= n:
                break
            grid[:, y * h + padding : (y + 1) * h, x * w + padding : (x + 1) * w] = tensor[k]
            k += 1
    return grid


def save_image(tensor, fp, format=None, **kwargs) -> None:
    """Save a batch or an image as a PNG grid (values in [0, 1])."""
    grid = make_grid(tensor, **kwargs)
    array = grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to("cpu", torch.uint8)
    write_png(array.numpy(), fp)
