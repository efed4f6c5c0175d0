"""The wire format: exact round trips, torn tails, corruption, and garbage in."""

from __future__ import annotations

import contextlib
import json
import math
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradwatch.core.errors import WireError
from gradwatch.core.nonfinite import from_jsonable, to_jsonable
from gradwatch.core.wire import (
    HEADER_SIZE,
    Array,
    Kind,
    Record,
    decode_record,
    encode_frame,
    encode_record,
    scan_frames,
)

SPECIAL_FLOATS = [
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    0.0,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    1e-300,
]
NASTY_TEXT = [
    "'; DROP TABLE runs; --",
    'a"b\\c',
    "%s %d {0}",
    "\x00nul",
    "名前 ✓ 🚀",
    "$f",
    "$d",
    "",
]

floats = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True) | st.sampled_from(
    SPECIAL_FLOATS
)
keys = st.text(max_size=12) | st.sampled_from(NASTY_TEXT)
scalars = st.none() | st.booleans() | st.integers() | floats | keys
meta_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
ITEM = {"f8": ("d", floats), "f4": ("f", st.floats(width=32)), "u1": ("B", None)}
INT_RANGES = {"i8": 63, "i4": 31}


@st.composite
def arrays(draw: st.DrawFn) -> Array:
    dtype = draw(st.sampled_from(["f8", "f4", "i8", "i4", "u1"]))
    n = draw(st.integers(0, 40))
    if dtype in INT_RANGES:
        bits = INT_RANGES[dtype]
        values: list[Any] = draw(
            st.lists(st.integers(-(2**bits), 2**bits - 1), min_size=n, max_size=n)
        )
    elif dtype == "u1":
        values = draw(st.lists(st.integers(0, 255), min_size=n, max_size=n))
    else:
        values = draw(st.lists(ITEM[dtype][1], min_size=n, max_size=n))  # type: ignore[arg-type]
    if n % 2 == 0 and n and draw(st.booleans()):
        return Array.from_values(dtype, values, shape=(2, n // 2))
    return Array.from_values(dtype, values)


records = st.builds(
    Record,
    kind=st.sampled_from(list(Kind)),
    meta=st.dictionaries(keys, meta_values, max_size=6),
    arrays=st.dictionaries(keys, arrays(), max_size=4),
)


def canon(obj: Any) -> Any:
    """A NaN-aware, sign-of-zero-aware, type-aware comparable form."""
    if isinstance(obj, float):
        return ("float", "nan" if math.isnan(obj) else struct.pack("<d", obj))
    if isinstance(obj, dict):
        return ("dict", sorted((k, canon(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return ("list", [canon(v) for v in obj])
    return (type(obj).__name__, obj)


def assert_same(a: Record, b: Record) -> None:
    assert a.kind == b.kind
    assert canon(a.meta) == canon(b.meta)
    assert a.arrays == b.arrays  # bytes equality: bit-exact, NaN included


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_record_round_trip(record: Record) -> None:
    payload = encode_record(record)
    back = decode_record(payload)
    assert_same(record, back)
    assert encode_record(back) == payload


@settings(max_examples=50)
@given(st.lists(records, min_size=1, max_size=4), st.integers(1, 2**40))
def test_frames_round_trip(recs: list[Record], first: int) -> None:
    data = b"".join(encode_frame(first + i, r) for i, r in enumerate(recs))
    scan = scan_frames(data)
    assert (scan.torn_tail_bytes, scan.corrupt_frames, scan.end_offset) == (0, 0, len(data))
    assert [f.seq for f in scan.frames] == [first + i for i in range(len(recs))]
    for frame, rec in zip(scan.frames, recs, strict=True):
        assert_same(frame.record, rec)
        assert frame.raw == data[frame.offset : frame.offset + frame.size]


@pytest.mark.parametrize("value", SPECIAL_FLOATS)
def test_special_floats_survive_meta_and_arrays(value: float) -> None:
    rec = Record(Kind.SCALARS, {"v": value, "l": [value]}, {"a": Array.from_values("f8", [value])})
    back = decode_record(encode_record(rec))
    assert canon(back.meta["v"]) == canon(value)
    assert canon(back.arrays["a"].to_list()[0]) == canon(value)


def test_jsonable_escapes_reserved_keys() -> None:
    meta = {"x": {"$f": "nan"}, "y": {"$d": 1}, "z": [math.inf]}
    encoded = to_jsonable(meta)
    json.dumps(encoded, allow_nan=False)  # strictly valid JSON
    assert from_jsonable(encoded) == meta | {"z": [math.inf]}


def test_large_array_round_trip() -> None:
    values = [float(i) * 1.5 for i in range(300_000)]
    rec = Record(Kind.STEPS, {}, {"g": Array.from_values("f8", values, shape=(300, 1000))})
    assert decode_record(encode_record(rec)).arrays["g"].to_list() == values


@pytest.mark.parametrize(
    ("dtype", "shape", "nbytes"), [("f8", (3,), 23), ("i4", (2, 2), 15), ("u1", (0,), 1)]
)
def test_array_length_must_match(dtype: str, shape: tuple[int, ...], nbytes: int) -> None:
    with pytest.raises(WireError, match="needs"):
        Array.from_buffer(dtype, shape, b"\0" * nbytes)


def test_bad_inputs_raise_wire_error() -> None:
    with pytest.raises(WireError, match="unknown dtype"):
        Array.from_values("f2", [1.0])
    with pytest.raises(WireError, match="cannot pack"):
        Array.from_values("u1", [300])
    with pytest.raises(WireError, match="not JSON-able"):
        encode_record(Record(Kind.EVENTS, {"x": object()}))
    with pytest.raises(WireError, match="keys must be str"):
        encode_record(Record(Kind.EVENTS, {"x": {1: 2}}))
    with pytest.raises(WireError, match="seq"):
        encode_frame(0, Record(Kind.END, {}))


def _payload(kind: int, meta: bytes, tail: bytes = b"\0\0") -> bytes:
    return struct.pack("<BI", kind, len(meta)) + meta + tail


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (_payload(99, b"{}"), "unknown record kind"),
        (_payload(1, b"[]"), "JSON object"),
        (_payload(1, b'{"a": NaN}'), "bare NaN"),
        (_payload(1, b'{"a": "\xff"}'), "malformed"),
        (_payload(1, b"{}", b"\0\0extra"), "unexpected bytes"),
        (_payload(1, b"{}", b"\1\0\1\0a\x09\x01"), "unknown dtype code"),
        (_payload(1, b"{}", b"\1\0\1\0a\x01\x01" + struct.pack("<QQ", 2, 8) + b"\0" * 8), "needs"),
        (_payload(1, b'{"a": {"$f": "zero"}}'), "non-finite float tag"),
        (b"\1\0", "truncated"),
    ],
)
def test_decode_malformed_payloads(payload: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        decode_record(payload)


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_decode_garbage_raises_only_wire_error(data: bytes) -> None:
    with contextlib.suppress(WireError):
        decode_record(data)


@settings(max_examples=150)
@given(records, st.data())
def test_decode_mutated_payload_raises_only_wire_error(record: Record, data: st.DataObject) -> None:
    payload = bytearray(encode_record(record))
    index = data.draw(st.integers(0, len(payload) - 1))
    payload[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(payload)))
    with contextlib.suppress(WireError):
        decode_record(bytes(payload[:cut]))


def three_frames() -> bytes:
    recs = [
        Record(Kind.RUN_START, {"name": "r'; --", "lr": 1e-3}),
        Record(Kind.STEPS, {"step": 1}, {"g": Array.from_values("f4", [1.0, math.nan])}),
        Record(Kind.END, {"ok": True}),
    ]
    return b"".join(encode_frame(i + 1, r) for i, r in enumerate(recs))


def test_torn_tail_at_every_offset() -> None:
    data = three_frames()
    ends = [f.offset + f.size for f in scan_frames(data).frames]
    for cut in range(len(data) + 1):
        scan = scan_frames(data[:cut])
        complete = [e for e in ends if e <= cut]
        assert [f.seq for f in scan.frames] == list(range(1, len(complete) + 1))
        assert scan.corrupt_frames == 0
        assert scan.end_offset == (complete[-1] if complete else 0)
        assert scan.torn_tail_bytes == cut - scan.end_offset


def test_every_flipped_byte_is_detected() -> None:
    data = three_frames()
    frames = scan_frames(data).frames
    for index in range(len(data)):
        damaged = bytearray(data)
        damaged[index] ^= 0x5A
        scan = scan_frames(bytes(damaged))
        hit = next(f for f in frames if f.offset <= index < f.offset + f.size)
        assert [f.seq for f in scan.frames] == [f.seq for f in frames if f is not hit]
        assert scan.corrupt_frames + (scan.torn_tail_bytes > 0) >= 1


def test_scan_resyncs_after_garbage_and_can_stop_early() -> None:
    data = three_frames()
    first = scan_frames(data).frames[0].size
    mixed = data[:first] + b"GW junk \x00GW" + data[first:]
    scan = scan_frames(mixed)
    assert [f.seq for f in scan.frames] == [1, 2, 3]
    assert scan.corrupt_frames == 1
    strict = scan_frames(mixed, resync=False)
    assert ([f.seq for f in strict.frames], strict.corrupt_frames) == ([1], 1)
    assert strict.end_offset == first


def test_scan_from_offset_and_header_size() -> None:
    data = three_frames()
    frames = scan_frames(data).frames
    later = scan_frames(data, start_offset=frames[1].offset)
    assert [f.seq for f in later.frames] == [2, 3]
    assert frames[0].size == HEADER_SIZE + len(encode_record(frames[0].record))


@pytest.mark.parametrize(
    "meta_text",
    [
        '{"loss":{"$f":"nan"}}',
        '{"loss":{"\\u0024f":"-inf"}}',  # the tag key spelled with an escape
        '{"user":{"$d":{"$f":"text"}}}',
        '{"plain":[1,2.5,"x"],"s":"{\\"$f\\":\\"nan\\"}"}',
    ],
)
def test_decoding_meta_without_the_walk_gives_what_the_walk_gives(meta_text: str) -> None:
    payload = struct.pack("<BI", int(Kind.EVENTS), len(meta_text)) + meta_text.encode()
    payload += struct.pack("<H", 0)
    got = decode_record(payload).meta
    assert repr(got) == repr(from_jsonable(json.loads(meta_text)))


def test_a_decoded_record_keeps_its_meta_text_which_equality_ignores() -> None:
    record = Record(Kind.EVENTS, {"loss": math.nan, "name": "w"})
    assert record.text is None
    back = decode_record(encode_record(record))
    assert back.text is not None
    assert repr(from_jsonable(json.loads(back.text))) == repr(back.meta)
    assert back == Record(Kind.EVENTS, back.meta, back.arrays)  # the text is not compared
