"""PNG files without PIL: 8-bit grayscale or RGB, written and read by this module."""

from __future__ import annotations

import struct
import zlib

import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def write_png(array, path) -> None:
    """Write an HxW or HxWx{1,3} uint8 array as a PNG file."""
    a = np.asarray(array, dtype=np.uint8)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    color = 0 if a.ndim == 2 else 2
    h, w = a.shape[:2]
    rows = a.reshape(h, -1)
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)
    header = struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
    data += _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(data)


def read_png(path) -> np.ndarray:
    """An HxW (gray) or HxWx3 uint8 array from a PNG this module wrote (no row filters)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    pos, idat, w = 8, b"", 0
    h = color = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            if depth != 8 or color not in (0, 2):
                raise ValueError(f"{path}: only 8-bit gray or RGB PNG files are read")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    channels = 1 if color == 0 else 3
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * channels)
    if raw[:, 0].any():
        raise ValueError(f"{path}: filtered PNG rows are not read by this shim")
    pixels = raw[:, 1:].reshape(h, w, channels)
    return pixels[:, :, 0].copy() if channels == 1 else pixels.copy()
