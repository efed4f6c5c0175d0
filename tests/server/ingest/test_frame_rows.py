"""Frame rows: the tensor list check, and a record's meta stored as the text it arrived in."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from gradwatch.core.nonfinite import from_jsonable
from gradwatch_server.jsontext import dump_json


def test_the_tensor_list_fast_check_accepts_and_refuses_as_the_named_checks() -> None:
    from gradwatch_server.exceptions import RequestError
    from gradwatch_server.ingest import validate as v
    from gradwatch_server.ingest.recordmeta import checked_tensors

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
    from gradwatch.core.wire import Kind, Record, decode_record, encode_record
    from gradwatch_server.ingest.frame_rows import meta_text

    received = decode_record(encode_record(Record(Kind.FINGERPRINT, meta)))
    text = meta_text(received)
    assert text is received.text  # not encoded again
    assert repr(from_jsonable(json.loads(text))) == repr(from_jsonable(json.loads(dump_json(meta))))


def test_a_meta_that_is_not_ascii_or_built_in_memory_is_encoded_as_before() -> None:
    from gradwatch.core.wire import Kind, Record, decode_record, encode_record
    from gradwatch_server.ingest.frame_rows import meta_text

    meta = {"host": "zürich", "loss": math.nan}
    received = decode_record(encode_record(Record(Kind.FINGERPRINT, meta)))
    assert received.text is not None and not received.text.isascii()
    assert meta_text(received) == dump_json(meta)  # ASCII only, as stored before
    assert meta_text(Record(Kind.FINGERPRINT, meta)) == dump_json(meta)
