"""Small checkers for untrusted record metadata; each raises ``RequestError(422, ...)``.

Messages name the frame (seq and kind), the field, what was received and what is allowed,
so a client author can fix the sender from the message alone.
"""

from __future__ import annotations

import math
from typing import Any

from gradwatch_server.exceptions import RequestError

INT64_MAX = (1 << 63) - 1
MISSING: Any = object()


class Where:
    """Names the frame being checked, for error messages."""

    def __init__(self, seq: int, kind: str) -> None:
        self.seq = seq
        self.kind = kind

    def fail(self, field: str, problem: str) -> RequestError:
        """The error for ``field`` of this frame."""
        return RequestError(422, f"frame seq {self.seq} ({self.kind}): {field} {problem}")


def text(where: Where, field: str, value: Any, *, max_len: int | None = None) -> str:
    """A string storable on every database: UTF-8 encodable, no NUL, not too long."""
    if not isinstance(value, str):
        raise where.fail(field, f"must be a string, got {type(value).__name__} {value!r:.60}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise where.fail(field, f"is not valid Unicode text ({e.reason})") from e
    if "\x00" in value:
        raise where.fail(field, "must not contain NUL characters")
    if max_len is not None and len(value) > max_len:
        raise where.fail(field, f"is {len(value)} characters long, the limit is {max_len}")
    return value


def opt_text(where: Where, field: str, value: Any, *, max_len: int | None = None) -> str | None:
    """Like ``text`` but ``None`` is allowed."""
    return None if value is None else text(where, field, value, max_len=max_len)


def integer(
    where: Where, field: str, value: Any, *, low: int = -INT64_MAX, high: int = INT64_MAX
) -> int:
    """An int (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.fail(field, f"must be an integer, got {type(value).__name__} {value!r:.60}")
    if not low <= value <= high:
        raise where.fail(field, f"is {value}, outside {low}..{high}")
    return value


def opt_integer(where: Where, field: str, value: Any, *, low: int = -INT64_MAX) -> int | None:
    """Like ``integer`` but ``None`` is allowed."""
    return None if value is None else integer(where, field, value, low=low)


def finite(where: Where, field: str, value: Any) -> float:
    """A finite number (it goes into a plain float column)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.fail(field, f"must be a number, got {type(value).__name__} {value!r:.60}")
    try:
        number = float(value)
    except OverflowError as e:
        raise where.fail(field, f"is too large ({value!r:.60})") from e
    if not math.isfinite(number):
        raise where.fail(field, f"must be finite, got {number!r}")
    return number


def opt_finite(where: Where, field: str, value: Any) -> float | None:
    """Like ``finite`` but ``None`` is allowed."""
    return None if value is None else finite(where, field, value)


def text_list(where: Where, field: str, value: Any, *, max_len: int) -> list[str]:
    """A list of strings."""
    if not isinstance(value, list):
        raise where.fail(field, f"must be a list of strings, got {type(value).__name__}")
    return [text(where, f"{field}[{i}]", v, max_len=max_len) for i, v in enumerate(value)]


def mapping(where: Where, field: str, value: Any) -> dict[str, Any]:
    """A JSON object."""
    if not isinstance(value, dict):
        raise where.fail(field, f"must be an object, got {type(value).__name__} {value!r:.60}")
    return value


def choice(where: Where, field: str, value: Any, allowed: tuple[str, ...]) -> str:
    """One of ``allowed``."""
    if value not in allowed:
        raise where.fail(field, f"must be one of {list(allowed)}, got {value!r:.60}")
    return str(value)
