"""`cv2` of the stand-in (OpenCV is not installed): `imread` of the PNG files the corpus's
setup commands write (with the torchvision shim's `io.write_png`, whatever their suffix),
as OpenCV gives them: an HxWx3 uint8 array in BGR order for `IMREAD_COLOR`; None for a
file it cannot read, as OpenCV does. Nothing else."""

from __future__ import annotations

from typing import Any

import numpy as np

IMREAD_UNCHANGED = -1
IMREAD_GRAYSCALE = 0
IMREAD_COLOR = 1


def imread(path: Any, flags: int = IMREAD_COLOR) -> Any:
    from torchvision.io import read_png

    try:
        image = np.asarray(read_png(str(path)))
    except (OSError, ValueError):
        return None
    if flags == IMREAD_GRAYSCALE:
        return image if image.ndim == 2 else image.mean(axis=2).astype(np.uint8)
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=2)
    return np.ascontiguousarray(image[:, :, ::-1]) if flags == IMREAD_COLOR else image
