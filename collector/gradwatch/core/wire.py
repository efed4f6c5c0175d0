"""The gradwatch wire format: records, frames and their exact byte layout.

This module is the only definition of the schema; the server imports it. Standard library
only. Everything is little-endian.

A **frame** is what the spool files and the ingest body are made of (concatenated)::

    offset size field
    0      2    magic            b"GW"
    2      1    schema version   SCHEMA_VERSION (1)
    3      1    kind             a Kind value (repeated as the payload's first byte)
    4      8    seq              u64, per run, starting at 1, strictly increasing
    12     4    payload length   u32, at most MAX_PAYLOAD_BYTES (64 MiB)
    16     4    crc32            zlib.crc32 of bytes 0..15 followed by the payload
    20     n    payload          an encoded Record (below)

A **payload** (``encode_record``) is::

    u8   kind
    u32  meta length M, then M bytes: a JSON object in UTF-8, after ``to_jsonable``
    u16  array count A, then A times:
         u16 name length, name (UTF-8); u8 dtype code; u8 ndim; ndim x u64 dims;
         u64 data length; data (little-endian items, row-major)

JSON has no NaN or infinity, so ``to_jsonable`` (:mod:`gradwatch.core.nonfinite`) writes
a non-finite float ``x`` as ``{"$f": "nan" | "inf" | "-inf"}`` and escapes a user dict
whose only key is ``"$f"`` or ``"$d"`` as ``{"$d": {...}}``; ``from_jsonable`` undoes
both. Finite floats (``-0.0``, subnormals, extremes) round-trip exactly through ``repr``.
NaN round-trips by class (its sign and payload bits are not kept); tuples come back as
lists.

``scan_frames`` reads a buffer tolerantly: an incomplete last frame (a writer killed
mid-write) is reported as ``torn_tail_bytes``; a damaged frame (CRC mismatch, bad header,
undecodable payload) is counted in ``corrupt_frames`` and the scan resynchronises on the
next magic that starts a valid frame.

Example::

    >>> rec = Record(Kind.SCALARS, {"loss": float("nan")}, {"step": Array.from_values("i8", [1])})
    >>> scan_frames(encode_frame(1, rec)).frames[0].record.meta["loss"]
    nan
"""

from __future__ import annotations

import enum
import json
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gradwatch.core.errors import WireError
from gradwatch.core.nonfinite import ESCAPED_KEYS, from_jsonable, may_be_tagged, to_jsonable

SCHEMA_VERSION: int = 1
FRAME_CONTENT_TYPE = "application/vnd.gradwatch.frames"
MAGIC = b"GW"
MAX_PAYLOAD_BYTES = 64 << 20
MAX_NDIM = 32

_HEADER = struct.Struct("<2sBBQI")  # magic, version, kind, seq, payload length
_CRC = struct.Struct("<I")
HEADER_SIZE = _HEADER.size + _CRC.size  # 20
_MAX_SEQ = (1 << 64) - 1


class Kind(enum.IntEnum):
    """What a record carries."""

    RUN_START = 1
    FINGERPRINT = 2
    STEPS = 3
    EVENTS = 4
    SCALARS = 5
    FINDINGS = 6
    HEARTBEAT = 7
    END = 8
    NOTICE = 9


_KINDS = frozenset(int(k) for k in Kind)

# dtype name -> (code on the wire, struct format letter, item size)
_DTYPES: dict[str, tuple[int, str, int]] = {
    "f8": (1, "d", 8),
    "f4": (2, "f", 4),
    "i8": (3, "q", 8),
    "i4": (4, "i", 4),
    "u1": (5, "B", 1),
}
_DTYPE_BY_CODE = {code: name for name, (code, _, _) in _DTYPES.items()}


@dataclass(frozen=True)
class Array:
    """A typed little-endian array (no numpy needed); ``data`` is row-major.

    Example: ``Array.from_values("f4", [1.0, 2.0, 3.0, 4.0], shape=(2, 2))``.
    """

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise WireError(f"unknown dtype {self.dtype!r}; expected one of {sorted(_DTYPES)}")
        if not isinstance(self.shape, tuple) or len(self.shape) > MAX_NDIM:
            raise WireError(f"shape must be a tuple of at most {MAX_NDIM} ints, got {self.shape!r}")
        if any(not isinstance(d, int) or d < 0 for d in self.shape):
            raise WireError(f"shape must hold non-negative ints, got {self.shape!r}")
        object.__setattr__(self, "data", bytes(self.data))  # no copy for bytes; freezes others
        expected = math.prod(self.shape) * _DTYPES[self.dtype][2]
        if len(self.data) != expected:
            raise WireError(
                f"array of dtype {self.dtype} and shape {self.shape} needs {expected} bytes, "
                f"got {len(self.data)}"
            )

    @classmethod
    def from_values(
        cls, dtype: str, values: Sequence[float | int], shape: tuple[int, ...] | None = None
    ) -> Array:
        """Pack Python numbers; ``shape`` defaults to ``(len(values),)``."""
        if dtype not in _DTYPES:
            raise WireError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
        try:
            data = struct.pack(f"<{len(values)}{_DTYPES[dtype][1]}", *values)
        except (struct.error, OverflowError, TypeError) as e:
            raise WireError(f"cannot pack values as {dtype}: {e}") from e
        return cls(dtype, (len(values),) if shape is None else tuple(shape), data)

    @classmethod
    def from_buffer(cls, dtype: str, shape: tuple[int, ...], data: bytes) -> Array:
        """Wrap raw little-endian bytes; their length must equal prod(shape) x itemsize."""
        return cls(dtype, tuple(shape), bytes(data))

    def to_list(self) -> list[float] | list[int]:
        """The items, flat and exact (NaN, infinities and -0.0 preserved)."""
        _, letter, size = _DTYPES[self.dtype]
        return list(struct.unpack(f"<{len(self.data) // size}{letter}", self.data))


@dataclass(frozen=True)
class Record:
    """One unit of data: a kind, JSON-able metadata and named arrays."""

    kind: Kind
    meta: dict[str, Any]
    arrays: dict[str, Array] = field(default_factory=dict)
    #: the meta's JSON text as it was decoded (``decode_record``; None for a record built
    #: in memory): a reader that stores the meta unchanged can keep this text instead of
    #: encoding it again (the server's ingest of a RUN_START or a fingerprint)
    text: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Frame:
    """A decoded frame; ``raw`` is its exact bytes (for forwarding without re-encoding)."""

    seq: int
    record: Record
    offset: int
    size: int
    raw: bytes


@dataclass
class Scan:
    """The result of ``scan_frames``; ``end_offset`` is just after the last good frame."""

    frames: list[Frame]
    torn_tail_bytes: int
    corrupt_frames: int
    end_offset: int


# --- JSON with exact non-finite floats: gradwatch.core.nonfinite ----------------------


def _reject_constant(token: str) -> Any:
    raise WireError(f"bare {token} is not allowed in meta JSON (use the $f encoding)")


# --- records --------------------------------------------------------------------------


def _meta_json(meta: dict[str, Any]) -> str:
    """The meta as JSON text: ``to_jsonable`` then ``json.dumps``. A meta whose nested
    values hold no dict (the per-step records) is dumped as it is — the same text, since
    for lists, strings, numbers and None ``to_jsonable`` only tags non-finite floats, which
    ``allow_nan=False`` then refuses, sending it the long way."""
    if _flat(meta):
        try:
            return json.dumps(meta, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        except ValueError:
            pass  # a NaN/±Inf somewhere: tag it
    return json.dumps(to_jsonable(meta), allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def _flat(meta: dict[str, Any]) -> bool:
    """Whether ``meta`` is a dict of str keys (none escaped) over values that are numbers,
    strings, None, bools and lists of them, lists nested three deep at most (a STEPS
    record's events: steps × events × fields) and no dict below the top."""
    if len(meta) == 1 and next(iter(meta)) in ESCAPED_KEYS:
        return False
    for key, value in meta.items():
        if type(key) is not str:
            return False
        if type(value) in _LEAF:
            continue
        if type(value) is not list:
            return False
        for item in value:
            if type(item) in _LEAF:
                continue
            if type(item) is not list:
                return False
            for leaf in item:
                if type(leaf) not in _LEAF and not (
                    type(leaf) is list and all(type(x) in _LEAF for x in leaf)
                ):
                    return False
    return True


_LEAF = frozenset({str, int, float, bool, type(None)})


def encode_record(record: Record) -> bytes:
    """Encode a record as a payload (see the module docstring for the layout)."""
    if not isinstance(record.kind, Kind):
        raise WireError(f"record kind must be a Kind, got {record.kind!r}")
    try:
        meta = _meta_json(record.meta).encode("utf-8")
    except (ValueError, RecursionError) as e:  # UnicodeEncodeError is a ValueError
        raise WireError(f"cannot encode meta of a {record.kind.name} record: {e}") from e
    parts = [struct.pack("<BI", int(record.kind), len(meta)), meta]
    parts.append(struct.pack("<H", len(record.arrays)))
    for name, array in record.arrays.items():
        parts.extend(_encode_array(name, array))
    payload = b"".join(parts)
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise WireError(f"record payload is {len(payload)} bytes, over {MAX_PAYLOAD_BYTES}")
    return payload


def _encode_array(name: str, array: Array) -> list[bytes]:
    try:
        raw_name = name.encode("utf-8")
    except (UnicodeEncodeError, AttributeError) as e:
        raise WireError(f"array name {name!r} is not encodable as UTF-8") from e
    if len(raw_name) > 0xFFFF:
        raise WireError(f"array name is {len(raw_name)} bytes, over 65535")
    head = struct.pack("<H", len(raw_name)) + raw_name
    dims = struct.pack(
        f"<BB{len(array.shape)}Q", _DTYPES[array.dtype][0], len(array.shape), *array.shape
    )
    return [head, dims, struct.pack("<Q", len(array.data)), array.data]


class _Reader:
    """Bounds-checked cursor over a payload."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise WireError(f"payload truncated reading {what} (needs {n} bytes at {self.pos})")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def decode_record(payload: bytes) -> Record:
    """Decode a payload; raises WireError (and nothing else) on malformed input."""
    try:
        return _decode_record(bytes(payload))
    except WireError:
        raise
    except (ValueError, RecursionError, TypeError, OverflowError, struct.error) as e:
        raise WireError(f"malformed record payload: {type(e).__name__}: {e}") from e


def _decode_record(payload: bytes) -> Record:
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise WireError(f"record payload is {len(payload)} bytes, over {MAX_PAYLOAD_BYTES}")
    reader = _Reader(payload)
    kind_code, meta_len = reader.unpack("<BI", "the record header")
    if kind_code not in _KINDS:
        raise WireError(f"unknown record kind {kind_code}")
    text = reader.take(meta_len, "meta").decode("utf-8")
    meta = json.loads(text, parse_constant=_reject_constant)
    if may_be_tagged(text):
        meta = from_jsonable(meta)
    if not isinstance(meta, dict):
        raise WireError(f"meta must be a JSON object, got {type(meta).__name__}")
    (count,) = reader.unpack("<H", "the array count")
    arrays: dict[str, Array] = {}
    for _ in range(count):
        name, array = _decode_array(reader)
        if name in arrays:
            raise WireError(f"duplicate array name {name!r}")
        arrays[name] = array
    if reader.pos != len(payload):
        raise WireError(f"{len(payload) - reader.pos} unexpected bytes after the last array")
    return Record(Kind(kind_code), meta, arrays, text)


def _decode_array(reader: _Reader) -> tuple[str, Array]:
    (name_len,) = reader.unpack("<H", "an array name length")
    name = reader.take(name_len, "an array name").decode("utf-8")
    code, ndim = reader.unpack("<BB", f"the dtype of array {name!r}")
    if code not in _DTYPE_BY_CODE:
        raise WireError(f"array {name!r} has unknown dtype code {code}")
    if ndim > MAX_NDIM:
        raise WireError(f"array {name!r} has {ndim} dimensions, over {MAX_NDIM}")
    shape = reader.unpack(f"<{ndim}Q", f"the shape of array {name!r}")
    (nbytes,) = reader.unpack("<Q", f"the data length of array {name!r}")
    data = reader.take(nbytes, f"the data of array {name!r}")
    return name, Array(_DTYPE_BY_CODE[code], tuple(shape), data)


# --- frames ---------------------------------------------------------------------------


def encode_frame(seq: int, record: Record) -> bytes:
    """Encode one frame holding ``record`` with sequence number ``seq`` (1 .. 2**64-1)."""
    if not isinstance(seq, int) or not 0 < seq <= _MAX_SEQ:
        raise WireError(f"seq must be an int in 1..2**64-1, got {seq!r}")
    payload = encode_record(record)
    header = _HEADER.pack(MAGIC, SCHEMA_VERSION, int(record.kind), seq, len(payload))
    crc = zlib.crc32(payload, zlib.crc32(header))
    return header + _CRC.pack(crc) + payload


def peek_frame_size(data: bytes, offset: int = 0) -> int | None:
    """Total size of the frame whose header starts at ``offset``, or None if implausible.

    Only the header is checked (magic, version, kind, length limit), not the CRC.
    """
    if len(data) - offset < HEADER_SIZE:
        return None
    magic, version, kind, _, length = _HEADER.unpack_from(data, offset)
    plausible = magic == MAGIC and version == SCHEMA_VERSION and kind in _KINDS
    if not plausible or length > MAX_PAYLOAD_BYTES:
        return None
    return HEADER_SIZE + int(length)


def _parse_frame(data: bytes, pos: int) -> Frame | None:
    """The valid, complete frame at ``pos`` or None."""
    size = peek_frame_size(data, pos)
    if size is None or pos + size > len(data):
        return None
    _, _, kind, seq, _ = _HEADER.unpack_from(data, pos)
    (crc,) = _CRC.unpack_from(data, pos + _HEADER.size)
    payload = data[pos + HEADER_SIZE : pos + size]
    if zlib.crc32(payload, zlib.crc32(data[pos : pos + _HEADER.size])) != crc or seq == 0:
        return None
    try:
        record = decode_record(payload)
    except WireError:
        return None
    if record.kind != kind:
        return None
    return Frame(int(seq), record, pos, size, data[pos : pos + size])


def _could_be_torn(data: bytes, pos: int) -> bool:
    """True if the bytes from ``pos`` to the end look like the start of a frame."""
    rest = len(data) - pos
    if rest < HEADER_SIZE:
        return MAGIC.startswith(data[pos : pos + 2])
    size = peek_frame_size(data, pos)
    return size is not None and pos + size > len(data)


def _next_valid(data: bytes, pos: int) -> int | None:
    """Offset of the next complete valid frame at or after ``pos``."""
    pos = data.find(MAGIC, pos)
    while pos != -1:
        if _parse_frame(data, pos) is not None:
            return pos
        pos = data.find(MAGIC, pos + 1)
    return None


def _resume_after_damage(data: bytes, pos: int) -> int:
    """Where to resume after damage before ``pos``: a valid frame, else a torn tail, else end."""
    valid = _next_valid(data, pos)
    if valid is not None:
        return valid
    candidate = data.find(MAGIC, pos)
    while candidate != -1:
        if _could_be_torn(data, candidate):
            return candidate
        candidate = data.find(MAGIC, candidate + 1)
    if len(data) - 1 >= pos and data.endswith(MAGIC[:1]):
        return len(data) - 1
    return len(data)


def scan_frames(data: bytes, start_offset: int = 0, *, resync: bool = True) -> Scan:
    """Decode every frame in ``data`` from ``start_offset``, tolerating damage (see above).

    With ``resync=False`` the scan stops at the first damaged frame (``corrupt_frames`` is
    then 1 and ``end_offset`` tells where); a server checking an untrusted body uses that,
    since resynchronising costs a CRC per candidate magic.
    """
    data = bytes(data)
    frames: list[Frame] = []
    corrupt = 0
    pos = end = start_offset
    while pos < len(data):
        frame = _parse_frame(data, pos)
        if frame is not None:
            frames.append(frame)
            pos = end = pos + frame.size
            continue
        if _could_be_torn(data, pos) and _next_valid(data, pos + 1) is None:
            return Scan(frames, len(data) - pos, corrupt, end)
        corrupt += 1
        if not resync:
            break
        pos = _resume_after_damage(data, pos + 1)
    return Scan(frames, 0, corrupt, end)
