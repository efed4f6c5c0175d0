# ruff: noqa: N999 (the package is named as the one it stands in for)
"""`PIL.Image` of the stand-in: importable; `open` refuses (no image files in the corpus);
`fromarray` gives the array back (the torchvision shim's image is a uint8 array)."""

from __future__ import annotations

from typing import Any


class Image:
    """The type name scripts refer to in annotations and isinstance checks."""


def open(fp: Any, *args: Any, **kwargs: Any) -> Image:
    raise OSError("Pillow is not installed: the corpus's PIL stand-in opens no images")


def fromarray(obj: Any, mode: Any = None) -> Any:
    """The array itself, as uint8: the torchvision shim's datasets and transforms take a
    uint8 HxW or HxWxC array where torchvision takes a PIL image (pytorch-domain-adaptation's
    ``GrayscaleToRgb`` stacks an MNIST digit to three channels and calls this)."""
    import numpy as np

    return np.asarray(obj, dtype=np.uint8)


# Pillow's resampling filters, by their values (swa_gaussian's joint transforms name them in
# a table at import)
NEAREST = 0
LANCZOS = ANTIALIAS = 1
BILINEAR = 2
BICUBIC = 3
BOX = 4
HAMMING = 5
