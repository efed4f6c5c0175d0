"""Numbers in finding messages, formatted for people: ``2.3e6`` rather than
``2320000.0000001``, ``1.6e15×`` rather than ``1585910307273860×``, never ``0×``."""

from __future__ import annotations

import math


def num(x: float, digits: int = 2) -> str:
    """``x`` with ``digits`` significant digits (whole numbers in full): plain from 0.001
    to 99,999, otherwise in scientific notation without padding (``2.3e6``, ``1e-9``);
    ``NaN``, ``Inf``, ``-Inf``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    if x == 0:
        return "0"
    if 10**digits <= abs(x) < 99_999.5:
        return f"{round(x):,}"
    if 1e-3 <= abs(x) < 10**digits:
        text = f"{x:.{digits}g}"
        return text if "e" not in text else f"{round(float(text)):,}"  # 99.7 -> 1e+02
    mantissa, _, exponent = f"{x:.{max(digits - 1, 0)}e}".partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def times(x: float) -> str:
    """A factor: ``3.2×``, ``1.6e15×``, ``4e-9×``; zero reads ``zero times``, never ``0×``."""
    if x == 0:
        return "zero times"
    return f"{num(x)}×"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 tensor``, ``3 tensors``: a count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
