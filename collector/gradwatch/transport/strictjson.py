"""Strict JSON: non-finite floats are written as the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"`` (the API's form), never as the bare tokens standard JSON does not have.

Example::

    >>> encode_floats({"values": [1.0, float("nan"), float("-inf")]})
    {'values': [1.0, 'NaN', '-Infinity']}
"""

from __future__ import annotations

import json
import math
from typing import Any


def encode_floats(obj: Any) -> Any:
    """Replace non-finite floats, at any depth, with their string names."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: encode_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode_floats(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes ``NaN``/``Infinity`` (the float walk only if needed)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:  # a non-finite float somewhere
        return json.dumps(encode_floats(obj), allow_nan=False, **kwargs)
