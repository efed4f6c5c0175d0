"""Stored JSON text (``jsontext.dump_json``): exactly what the tagging walk would write."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from gradwatch.core.nonfinite import from_jsonable, to_jsonable
from gradwatch_server.jsontext import dump_json


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
