"""The functional transforms behind the shim's transform classes."""

from __future__ import annotations

import enum
import numbers

import numpy as np
import torch
import torch.nn.functional as nnf


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def to_tensor(pic) -> torch.Tensor:
    """A float CxHxW tensor: an HxW(xC) uint8 array scaled to [0, 1]; a tensor kept (uint8
    scaled)."""
    if isinstance(pic, torch.Tensor):
        return pic.float().div(255) if pic.dtype == torch.uint8 else pic
    a = np.asarray(pic)
    if a.ndim == 2:
        a = a[:, :, None]
    t = torch.from_numpy(np.ascontiguousarray(a.transpose(2, 0, 1)))
    return t.float().div(255) if t.dtype == torch.uint8 else t.float()


pil_to_tensor = to_tensor


def normalize(tensor, mean, std, inplace=False):
    if not inplace:
        tensor = tensor.clone()
    mean = torch.as_tensor(mean, dtype=tensor.dtype).view(-1, 1, 1)
    std = torch.as_tensor(std, dtype=tensor.dtype).view(-1, 1, 1)
    return tensor.sub_(mean).div_(std)


def resize(img, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
    img = to_tensor(img)
    h, w = img.shape[-2:]
    if isinstance(size, numbers.Number) or len(size) == 1:
        s = int(size if isinstance(size, numbers.Number) else size[0])
        if h <= w:
            oh, ow = s, int(s * w / h)
        else:
            oh, ow = int(s * h / w), s
        if max_size is not None and max(oh, ow) > max_size:
            oh, ow = int(max_size * oh / max(oh, ow)), int(max_size * ow / max(oh, ow))
    else:
        oh, ow = int(size[0]), int(size[1])
    if (oh, ow) == (h, w):
        return img
    mode = interpolation.value if isinstance(interpolation, InterpolationMode) else "bilinear"
    if mode not in ("nearest", "bilinear", "bicubic"):
        mode = "bilinear"
    batch = img.reshape(-1, *img.shape[-3:]).float()
    kwargs = {} if mode == "nearest" else {"align_corners": False}
    out = nnf.interpolate(batch, size=(oh, ow), mode=mode, **kwargs)
    return out.reshape(*img.shape[:-2], oh, ow)


def center_crop(img, output_size):
    img = to_tensor(img)
    if isinstance(output_size, numbers.Number):
        output_size = (int(output_size), int(output_size))
    th, tw = int(output_size[0]), int(output_size[-1])
    h, w = img.shape[-2:]
    if th > h or tw > w:
        img = pad(img, [max((tw - w + 1) // 2, 0), max((th - h + 1) // 2, 0)])
        h, w = img.shape[-2:]
    i = round((h - th) / 2.0)
    j = round((w - tw) / 2.0)
    return img[..., i : i + th, j : j + tw]


def pad(img, padding, fill=0, padding_mode="constant"):
    img = to_tensor(img)
    if isinstance(padding, numbers.Number):
        left = right = top = bottom = int(padding)
    elif len(padding) == 2:
        left = right = int(padding[0])
        top = bottom = int(padding[1])
    else:
        left, top, right, bottom = (int(p) for p in padding)
    mode = {"edge": "replicate", "symmetric": "reflect"}.get(padding_mode, padding_mode)
    batch = img.reshape(-1, *img.shape[-3:])
    if mode == "constant":
        out = nnf.pad(batch, (left, right, top, bottom), mode="constant", value=float(fill))
    else:
        out = nnf.pad(batch, (left, right, top, bottom), mode=mode)
    return out.reshape(*img.shape[:-2], *out.shape[-2:])


def hflip(img):
    return to_tensor(img).flip(-1)


def vflip(img):
    return to_tensor(img).flip(-2)


def rgb_to_grayscale(img, num_output_channels=1):
    img = to_tensor(img)
    if img.shape[-3] == 1:
        gray = img
    else:
        r, g, b = img.unbind(-3)
        gray = (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(-3)
    return gray.expand(*gray.shape[:-3], num_output_channels, *gray.shape[-2:])


def crop(img, top, left, height, width):
    return to_tensor(img)[..., top : top + height, left : left + width]
