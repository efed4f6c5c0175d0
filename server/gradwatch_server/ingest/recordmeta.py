"""Checks of the record meta fields that the server's readers depend on (ingest, 422).

What a stored run's pages read back, besides the arrays: ``RUN_START`` ``meta.tensors``
(the layout of every statistics array) and, per ``STEPS`` window, ``meta.events`` (the
lifecycle view) and ``meta.batch_hash`` (the cross-run comparison). Each must have the
type and length the readers expect, so that accepted data can always be read.
"""

from __future__ import annotations

from typing import Any

from gradwatch_server.ingest import validate as v
from gradwatch_server.models import NAME_MAX

MAX_TENSORS = 100_000  # tensors of one RUN_START (a large model has a few thousand)


def check_per_step(where: v.Where, meta: dict[str, Any], n: int) -> None:
    """``meta.events`` and ``meta.batch_hash`` of a STEPS record of ``n`` steps."""
    _per_step(where, meta, "events", n, _events)
    _per_step(where, meta, "batch_hash", n, _batch_hash)


def checked_tensors(where: v.Where, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` after checking ``meta.tensors``: the list every read of the run's
    statistics is laid out by (a name and an optimizer index per row)."""
    tensors = meta.get("tensors", [])
    if not isinstance(tensors, list) or len(tensors) > MAX_TENSORS:
        got = f"{len(tensors):,} items" if isinstance(tensors, list) else type(tensors).__name__
        raise where.fail("meta.tensors", f"must be a list of at most {MAX_TENSORS:,}, got {got}")
    for item in tensors:  # the common case in one pass: a dict, an ASCII name, an int
        if type(item) is not dict:
            break
        name, optimizer = item.get("name"), item.get("optimizer", 0)
        if not (
            type(name) is str
            and name.isascii()
            and "\x00" not in name
            and len(name) <= NAME_MAX
            and type(optimizer) is int
            and 0 <= optimizer <= 1 << 20
        ):
            break
    else:
        return meta
    for i, item in enumerate(tensors):  # the checks that name what is wrong
        tensor = v.mapping(where, f"meta.tensors[{i}]", item)
        v.text(where, f"meta.tensors[{i}].name", tensor.get("name"), max_len=NAME_MAX)
        v.integer(
            where, f"meta.tensors[{i}].optimizer", tensor.get("optimizer", 0), low=0, high=1 << 20
        )
    return meta


def _per_step(where: v.Where, meta: dict[str, Any], field: str, n: int, item: Any) -> None:
    """``meta[field]``, when present, is a list of one valid ``item`` per step."""
    values = meta.get(field)
    if values is None:
        return
    if not isinstance(values, list) or len(values) != n:
        raise where.fail(f"meta.{field}", f"must be a list of one entry per step ({n})")
    for i, value in enumerate(values):
        item(where, f"meta.{field}[{i}]", value)


def _events(where: v.Where, field: str, value: Any) -> None:
    """One step's lifecycle events: a list of ``[kind, seconds, detail]`` lists."""
    if not isinstance(value, list) or not all(isinstance(e, list) for e in value):
        raise where.fail(field, f"must be a list of event lists, got {value!r:.60}")


def _batch_hash(where: v.Where, field: str, value: Any) -> None:
    v.opt_text(where, field, value, max_len=64)
