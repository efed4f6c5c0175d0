"""Non-finite floats in JSON: the one module that writes and reads them.

JSON has no NaN or infinity, so gradwatch writes them in one of two spellings, each defined
only here, chosen by whether a string may stand where the float stands:

- **names**, for fields that always hold a float (series values, the API's numbers):
  ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (:data:`NAMES`, :func:`encode_floats`,
  :func:`decode_floats`, :func:`decode_float`, :func:`dumps`). A reader knows the field is a
  float, so the string cannot be mistaken for text.
- **tags**, for free-form objects where a string may stand (record meta on the wire, stored
  JSON, finding details, a run's start/end/fingerprint in the API): ``{"$f": "nan" | "inf" |
  "-inf"}``, with a user dict whose only key is ``"$f"`` or ``"$d"`` escaped as ``{"$d":
  {...}}`` (:func:`to_jsonable`, :func:`from_jsonable`, :func:`loads_tagged`), so NaN and
  the string ``"NaN"`` stay distinct.

Finite floats (``-0.0``, subnormals, extremes) round-trip exactly through ``repr``; NaN
round-trips by class (its sign and payload bits are not kept); tuples come back as lists.

Example::

    >>> encode_floats({"values": [1.0, float("nan"), float("-inf")]})
    {'values': [1.0, 'NaN', '-Infinity']}
    >>> to_jsonable({"loss": float("inf")})
    {'loss': {'$f': 'inf'}}
"""

from __future__ import annotations

import json
import math
from typing import Any

from gradwatch.core.errors import WireError

#: the API's names of the non-finite floats (fields that always hold a float)
NAMES: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
#: the wire's tags of the non-finite floats (``{"$f": tag}`` in free-form objects)
TAGS: dict[str, float] = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
#: keys of a one-key dict that ``to_jsonable`` escapes as ``{"$d": {...}}``
ESCAPED_KEYS = ("$f", "$d")


def name(x: float) -> str:
    """The API's name of a non-finite float."""
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def _tag(x: float) -> str:
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


# --- names: fields that always hold a float ---------------------------------------------


def encode_floats(obj: Any) -> Any:
    """Replace non-finite floats, at any depth, with their names."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else name(obj)
    if isinstance(obj, dict):
        return {k: encode_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode_floats(v) for v in obj]
    return obj


def decode_floats(obj: Any) -> Any:
    """The names back to floats, at any depth (inverse of :func:`encode_floats`)."""
    if isinstance(obj, str):
        return NAMES.get(obj, obj)
    if isinstance(obj, dict):
        return {k: decode_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_floats(v) for v in obj]
    return obj


def decode_float(value: float | int | str) -> float:
    """One float field's value (a number or a name) as a float; ``KeyError`` for other text."""
    return NAMES[value] if isinstance(value, str) else float(value)


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes ``NaN``/``Infinity`` (the float walk only if needed)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:  # a non-finite float somewhere
        return json.dumps(encode_floats(obj), allow_nan=False, **kwargs)


# --- tags: free-form objects ------------------------------------------------------------


def to_jsonable(obj: Any) -> Any:
    """Turn meta into plain JSON values, encoding NaN/±Inf as ``{"$f": ...}``."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"$f": _tag(obj)}
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise WireError(f"meta keys must be str, got {type(key).__name__} {key!r}")
            out[key] = to_jsonable(value)
        return {"$d": out} if len(out) == 1 and next(iter(out)) in ESCAPED_KEYS else out
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    raise WireError(f"meta value of type {type(obj).__name__} is not JSON-able: {obj!r:.80}")


def from_jsonable(obj: Any) -> Any:
    """Inverse of ``to_jsonable``."""
    if isinstance(obj, list):
        return [from_jsonable(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        key, value = next(iter(obj.items()))
        if key == "$f":
            if value not in TAGS:
                raise WireError(f"bad non-finite float tag {value!r}")
            return TAGS[value]
        if key == "$d" and isinstance(value, dict):
            return {k: from_jsonable(v) for k, v in value.items()}
    return {k: from_jsonable(v) for k, v in obj.items()}


def may_be_tagged(text: str) -> bool:
    """False when JSON ``text`` holds no ``$f``/``$d`` key, so ``from_jsonable`` would
    return its value unchanged: those keys can only be written as ``"$f"``/``"$d"`` or
    with ``\\u`` escapes (the walk over every value costs more than parsing)."""
    return '"$f"' in text or '"$d"' in text or "\\u" in text


def loads_tagged(text: str | bytes) -> Any:
    """``from_jsonable(json.loads(text))``, without the walk when nothing is tagged."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    value = json.loads(text)
    return from_jsonable(value) if may_be_tagged(text) else value
