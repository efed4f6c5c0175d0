"""Frame rows: the stored JSON text is exactly what the tagging walk would write."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from gradwatch.wire import from_jsonable, to_jsonable
from gradwatch_server.frame_rows import dump_json


def _walked(value: Any) -> str:
    return json.dumps(to_jsonable(value), allow_nan=False, separators=(",", ":"))


@pytest.mark.parametrize(
    "value",
    [
        {"events": [["zero_grad", 0.25, "optimizer"], ["step", 1e-300, ""]], "n": [1, 2]},
        {"loss": math.nan, "lr": [math.inf, -math.inf, -0.0]},
        {"$f": "nan"},  # a user's one-key object that looks like a tag
        {"$d": {"x": 1}},
        {"a": {"$f": "inf"}, "b": '{"$f": 1}'},
        {"$f": 1, "other": 2},  # two keys: no tag needed
        {"text": "héllo \u2028 \x00", "tuple": (1, 2.5)},
        [],
        None,
    ],
)
def test_dump_json_matches_the_walk_and_round_trips(value: Any) -> None:
    text = dump_json(value)
    assert text == _walked(value)
    back = from_jsonable(json.loads(text))
    assert json.dumps(back, default=str) == json.dumps(
        from_jsonable(json.loads(_walked(value))), default=str
    )


def test_dump_json_refuses_what_the_walk_refuses() -> None:
    with pytest.raises(Exception, match="not JSON-able"):
        dump_json({"x": object()})


def test_the_tensor_list_fast_check_accepts_and_refuses_as_the_named_checks() -> None:
    from gradwatch_server import validate as v
    from gradwatch_server.exceptions import RequestError
    from gradwatch_server.recordmeta import checked_tensors

    where = v.Where(1, "RUN_START")
    good = [{"name": "0.weight", "optimizer": 0}, {"name": "é.ß", "optimizer": 1 << 20}]
    meta = {"tensors": good}
    assert checked_tensors(where, meta) is meta
    bad = {
        "a bool": ({"name": "w", "optimizer": True}, "meta.tensors[1].optimizer must be an int"),
        "too big": ({"name": "w", "optimizer": (1 << 20) + 1}, "meta.tensors[1].optimizer is"),
        "no name": ({"optimizer": 0}, "meta.tensors[1].name must be a string"),
        "a NUL": ({"name": "a\x00b"}, "meta.tensors[1].name must not contain NUL"),
        "a list": (["w"], "meta.tensors[1] must be an object"),
        "surrogate": ({"name": "\ud800"}, "meta.tensors[1].name is not valid Unicode"),
    }
    for what, (item, message) in bad.items():
        with pytest.raises(RequestError) as caught:
            checked_tensors(where, {"tensors": [good[0], item, good[1]]})
        assert caught.value.status == 422 and message in caught.value.message, what


@pytest.mark.parametrize(
    "meta",
    [
        {"seeds": {"torch": 1}, "loss": math.nan, "lr": [math.inf, -0.0]},
        {"$f": "nan"},  # a user's object that looks like a tag
        {"tensors": [{"name": "0.weight", "optimizer": 0}] * 3, "big": 1e300},
    ],
)
def test_a_received_meta_is_stored_as_its_text_and_reads_back_the_same(meta: Any) -> None:
    from gradwatch.wire import Kind, Record, decode_record, encode_record
    from gradwatch_server.frame_rows import meta_text

    received = decode_record(encode_record(Record(Kind.FINGERPRINT, meta)))
    text = meta_text(received)
    assert text is received.text  # not encoded again
    assert repr(from_jsonable(json.loads(text))) == repr(from_jsonable(json.loads(dump_json(meta))))


def test_a_meta_that_is_not_ascii_or_built_in_memory_is_encoded_as_before() -> None:
    from gradwatch.wire import Kind, Record, decode_record, encode_record
    from gradwatch_server.frame_rows import meta_text

    meta = {"host": "zürich", "loss": math.nan}
    received = decode_record(encode_record(Record(Kind.FINGERPRINT, meta)))
    assert received.text is not None and not received.text.isascii()
    assert meta_text(received) == dump_json(meta)  # ASCII only, as stored before
    assert meta_text(Record(Kind.FINGERPRINT, meta)) == dump_json(meta)
