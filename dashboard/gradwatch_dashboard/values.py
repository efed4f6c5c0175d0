"""Turning the API's JSON values into floats, and small numeric helpers for the figures.

The API writes NaN and ±Inf as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``
(JSON has no such numbers); ``floats`` turns them back into Python floats.

Example::

    >>> floats([1, "NaN", "-Infinity"])
    [1.0, nan, -inf]
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from gradwatch.core.nonfinite import NAMES

NONFINITE = NAMES  # the API's names of NaN and ±Inf


def to_float(value: Any) -> float:
    """One API value as a float (``None`` and unknown text become NaN)."""
    if isinstance(value, str):
        return NONFINITE.get(value, math.nan)
    if value is None:
        return math.nan
    return float(value)


def floats(values: Iterable[Any]) -> list[float]:
    """API values as floats."""
    return [to_float(v) for v in values]


def matrix(rows: Iterable[Iterable[Any]]) -> list[list[float]]:
    """A list of rows of API values as floats."""
    return [floats(row) for row in rows]


def grid(values: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A matrix of API values as a float64 array: a typed array (``{"dtype", "shape",
    "bdata"}``, the overview's ``encoding=base64``) decoded from its bytes, or rows of JSON
    values (``"NaN"``, ``"Infinity"``, ``"-Infinity"`` and ``None`` parsed by numpy in one
    pass; rows of unequal length or unknown text go through ``matrix``, padded with NaN)."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    if isinstance(values, dict):
        shape = [int(n) for n in values["shape"]]
        raw = base64.b64decode(values["bdata"])
        kind = {"f4": "<f4", "f8": "<f8"}[values["dtype"]]
        return np.frombuffer(raw, dtype=kind).reshape(shape).astype(np.float64)
    rows = list(values)
    if not rows:
        return np.zeros((0, 0))
    try:
        out = np.asarray(rows, dtype=np.float64)
        if out.ndim == 2:
            return out
    except (TypeError, ValueError):
        pass
    parsed = matrix(rows)
    width = max(len(r) for r in parsed)
    return np.asarray([r + [math.nan] * (width - len(r)) for r in parsed], dtype=np.float64)


def log10(value: float) -> float | None:
    """``log10`` of a positive finite value; ``None`` for anything else (drawn as a gap)."""
    if not math.isfinite(value) or value <= 0:
        return None
    return math.log10(value)


def kind(value: float) -> str:
    """``finite``, ``nan``, ``inf`` or ``-inf``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return "finite"


def fmt(value: Any, digits: int = 4) -> str:
    """A value for people: NaN and ±Inf by name, floats with ``digits`` significant digits."""
    if isinstance(value, str) and value in NONFINITE:
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return f"{value:.{digits}g}"
    return str(value)


def first_nonfinite(steps: Sequence[int], values: Sequence[float]) -> int | None:
    """The first step whose value is not finite, or ``None``."""
    for step, value in zip(steps, values, strict=False):
        if not math.isfinite(value):
            return step
    return None
