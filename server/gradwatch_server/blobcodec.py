"""Lossless packing of float statistic blobs: byte planes, the high ones Huffman-coded.

A float's high byte(s) hold its sign and exponent, which change little along a tensor's
steps (and within one chunk take few values even for noise), while its low bytes are
close to random. A ``stat:`` blob of ``f4`` values is therefore stored as its
top byte plane deflated with Huffman coding only (no match search: a few ns a
value) followed by the low planes as they are, with dtype ``f4z``; a blob that would not
shrink stays plain. ``f8`` (top 2 planes, ``f8z``) is read and can be written, but
ingest leaves it plain (``PACKED``). Decoding restores every bit (NaN payloads, -0.0,
subnormals): ``unpack_bytes(pack(a)) == a.tobytes()``.

Layout of a packed blob: ``<u32 length of the deflated part>``, the raw-deflate stream of
the high planes (highest byte first, each plane in value order), then the low planes
(byte 0 first, each in value order).

Example::

    dtype, data = pack(matrix)          # ("f4z", b"...") or ("f4", matrix.tobytes())
    again = unpack_rows(data, dtype, *matrix.shape)     # pick=[3, 7]: two rows only
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

HIGH_PLANES = {"f4": 1, "f8": 2}
# what ingest packs: f4 only. Packing f8 saves a fifth to a third of its bytes but costs
# ~30 ns a value (its planes' strided copies): 0.3-0.45 ms of a ~1.7 ms request of
# 12,000 f8 values (benchmarks/ingest_cpu.py), too much for the capacity goal.
PACKED = ("f4",)
_LEN = struct.Struct("<I")


def pack(values: np.ndarray[Any, Any], dtypes: tuple[str, ...] = PACKED) -> tuple[str, bytes]:
    """``(dtype, data)`` of a float matrix: packed when its dtype is one of ``dtypes``
    and that is smaller, else plain."""
    plain = values.dtype.str.lstrip("<|=")
    raw = np.ascontiguousarray(values).tobytes()
    high = HIGH_PLANES.get(plain) if plain in dtypes else None
    if high is None or values.size < 64:
        return plain, raw
    size = values.dtype.itemsize
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(-1, size).T  # (bytes, values)
    coder = zlib.compressobj(1, zlib.DEFLATED, -15, 9, zlib.Z_HUFFMAN_ONLY)
    deflated = coder.compress(planes[size - high :][::-1].tobytes()) + coder.flush()
    packed = _LEN.pack(len(deflated)) + deflated + planes[: size - high].tobytes()
    return (plain + "z", packed) if len(packed) < len(raw) else (plain, raw)


def unpack_rows(
    data: bytes, dtype: str, rows: int, columns: int, pick: list[int] | None = None
) -> np.ndarray[Any, Any]:
    """The ``(rows, columns)`` matrix of a packed blob (``pick``: only those rows, in
    that order; the high planes are inflated whole, the low ones read for those rows).

    Raises ValueError for a blob that is damaged or of another size.
    """
    plain = dtype[:-1] if dtype.endswith("z") else ""
    high = HIGH_PLANES.get(plain)
    if high is None:
        raise ValueError(f"unknown packed dtype {dtype!r}")
    size = np.dtype(plain).itemsize
    count = rows * columns
    if len(data) < _LEN.size:
        raise ValueError("a packed blob shorter than its header")
    (length,) = _LEN.unpack_from(data)
    end = _LEN.size + length
    inflater = zlib.decompressobj(-15)
    top = inflater.decompress(data[_LEN.size : end], high * count)
    if len(top) != high * count or len(data) - end != (size - high) * count:
        raise ValueError(f"a packed {plain} blob does not hold {rows} × {columns} values")
    hi = np.frombuffer(top, dtype=np.uint8).reshape(high, rows, columns)[::-1]
    lo = np.frombuffer(data, dtype=np.uint8, offset=end).reshape(size - high, rows, columns)
    if pick is not None:
        hi, lo = hi[:, pick], lo[:, pick]
    out = np.empty((hi.shape[1], columns, size), dtype=np.uint8)
    out[..., size - high :] = np.moveaxis(hi, 0, -1)
    out[..., : size - high] = np.moveaxis(lo, 0, -1)
    return out.view(np.dtype(plain).newbyteorder("<"))[..., 0]


def unpack_bytes(data: bytes, dtype: str, count: int) -> bytes:
    """The plain little-endian bytes of ``count`` values of a blob of ``dtype``."""
    if not dtype.endswith("z"):
        return bytes(data)
    return unpack_rows(data, dtype, 1, count).tobytes()
