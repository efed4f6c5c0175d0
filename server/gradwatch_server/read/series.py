"""Reading per-step series out of the chunk store, downsampled with numpy.

``downsample`` (in :mod:`gradwatch.core.downsample`, shared with the local reader of
``gradwatch.open_run``) keeps each bucket's min and max and every non-finite point.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sqlalchemy import and_, select
from sqlmodel import Session, col

from gradwatch.core.downsample import downsample as downsample
from gradwatch.core.records import tensor_rows as _tensor_rows
from gradwatch_server.blobcodec import unpack_rows
from gradwatch_server.exceptions import RequestError
from gradwatch_server.models import SeriesBlob, SeriesChunk
from gradwatch_server.problems import note

Vector = np.ndarray[Any, Any]
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Output budget of one reply: series × points. A point of a float32 statistic is about 26
# bytes of JSON (docs/limits.md), so a reply stays near 26 MB whatever the query asks for.
MAX_REPLY_VALUES = 1_000_000


def check_budget(series: int, points: int) -> None:
    """422 when ``series`` series of ``points`` points each exceed the reply budget."""
    if series * points > MAX_REPLY_VALUES:
        raise RequestError(
            422,
            f"this request asks for {series:,} series × {points:,} points, over the limit of "
            f"{MAX_REPLY_VALUES:,} values per reply; ask for fewer names or fewer points",
        )


@dataclass
class Block:
    """Several series of one blob name over a step range: ``values[i]`` is row ``rows[i]``."""

    steps: Vector
    values: Vector


def read_block(
    session: Session,
    run_id: str,
    optimizer: int,
    name: str,
    rows: list[int] | None,
    start: int | None = None,
    end: int | None = None,
) -> Block:
    """Rows ``rows`` (all if None) of blob ``name`` over steps ``[start, end]``, by step."""
    lo = INT64_MIN if start is None else start
    hi = INT64_MAX if end is None else end
    query = (
        select(
            col(SeriesChunk.steps),
            col(SeriesBlob.dtype),
            col(SeriesBlob.rows),
            col(SeriesBlob.data),
        )
        .join(
            SeriesBlob,
            and_(
                col(SeriesBlob.run_id) == col(SeriesChunk.run_id),
                col(SeriesBlob.seq) == col(SeriesChunk.seq),
                col(SeriesBlob.name) == name,
            ),
        )
        .where(
            col(SeriesChunk.run_id) == run_id,
            col(SeriesChunk.optimizer) == optimizer,
            col(SeriesChunk.step_last) >= lo,
            col(SeriesChunk.step_first) <= hi,
        )
    )
    step_parts: list[Vector] = []
    value_parts: list[Vector] = []
    for steps_raw, dtype, nrows, data in session.execute(query):
        steps = np.frombuffer(steps_raw, dtype="<i8")
        wanted = None if rows is None else [r for r in rows if r < nrows]
        picked = unpack(data, dtype, nrows, len(steps), f"{name} of run {run_id}", wanted)
        if picked is None:
            continue
        if rows is not None and len(picked) != len(rows):
            continue  # a tensor added later than this chunk (rare): skip the chunk
        if start is not None or end is not None:  # else every step is in range
            mask = (steps >= lo) & (steps <= hi)
            steps, picked = steps[mask], picked[:, mask]
        step_parts.append(steps)
        value_parts.append(picked)
    width = len(rows) if rows is not None else max((len(v) for v in value_parts), default=0)
    if not step_parts:
        return Block(np.zeros(0, dtype=np.int64), np.zeros((width, 0)))
    # one widening to float64 after joining the chunks, not one per chunk
    steps = np.concatenate(step_parts)
    values = np.concatenate([_widen(v, width) for v in value_parts], 1).astype(np.float64)
    if np.all(steps[1:] >= steps[:-1]):  # chunks read in step order: no reordering copy
        return Block(steps, values)
    order = np.argsort(steps, kind="stable")
    return Block(steps[order], values[:, order])


def unpack(
    data: bytes, dtype: str, rows: int, columns: int, what: str, pick: list[int] | None = None
) -> Vector | None:
    """A stored blob as its ``(rows, columns)`` matrix (``pick``: those rows only), or None
    (noted) when it is not one. Packed statistics (dtype ``f4z``/``f8z``, see
    :mod:`gradwatch_server.blobcodec`) are decoded here."""
    try:
        if dtype.endswith("z"):
            if rows < 1:
                raise ValueError(f"{rows} rows")
            return unpack_rows(data, dtype, rows, columns, pick)
        kind = np.dtype(dtype).newbyteorder("<")
        if rows < 1 or kind.kind not in "fiub" or len(data) != rows * columns * kind.itemsize:
            raise ValueError(f"{len(data)} bytes of {dtype} are not {rows} × {columns}")
        matrix = np.frombuffer(data, dtype=kind).reshape(rows, columns)
        return matrix if pick is None else matrix[pick]
    except (TypeError, ValueError) as e:
        note(f"{what}: a stored chunk cannot be read ({e}); it is left out")
        return None


def _widen(values: Vector, width: int) -> Vector:
    """Rows padded with NaN: a metric with more columns later (a new param group's lr)."""
    if len(values) == width:
        return values
    return np.vstack([values, np.full((width - len(values), values.shape[1]), np.nan)])


@dataclass(frozen=True)
class Selection:
    """What to read: tensor names × stats, per-step metrics, user scalars, a step range."""

    tensors: list[str]
    stats: list[str]
    metrics: list[str]
    scalars: list[str]
    optimizer: int = 0
    start: int | None = None
    end: int | None = None
    points: int = 1000


def tensor_rows(start_meta: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Tensor name -> (optimizer, row), from RUN_START; unreadable parts become problems."""
    return _tensor_rows(start_meta, note)


def jsonable(values: Vector) -> list[Any]:
    """``values`` (any shape) as nested lists of floats, NaN and ±Inf already as the API's
    strings: the reply is then written by the C encoder in one pass (a non-finite float
    left in made it fail, walk every value in Python and start again: 60 ms for an
    overview of 60,000 cells with one NaN in it)."""
    rows = np.asarray(values, dtype=np.float64)
    if np.isfinite(rows).all():
        out: list[Any] = rows.tolist()
        return out
    cells = rows.astype(object)
    cells[np.isnan(rows)] = "NaN"
    cells[np.isposinf(rows)] = "Infinity"
    cells[np.isneginf(rows)] = "-Infinity"
    named: list[Any] = cells.tolist()
    return named


def _item(
    name: str, kind: str, steps: Vector, values: Vector, points: int, **extra: Any
) -> dict[str, Any]:
    kept_steps, kept = downsample(steps, values, points)
    return {
        "name": name,
        "kind": kind,
        "steps": kept_steps.tolist(),
        "values": jsonable(kept),
        "total": len(values),
        "downsampled": len(kept) < len(values),
        **extra,
    }


def select_series(
    session: Session,
    run_id: str,
    start_meta: dict[str, Any],
    sel: Selection,
    steps: int | None = None,
) -> list[dict[str, Any]]:
    """The selected series, each downsampled to ``sel.points``; unknown names are skipped.
    ``steps`` (the run's step count) caps what one series can hold, for the reply budget."""
    sel = replace(  # a name asked for twice is one series
        sel,
        tensors=list(dict.fromkeys(sel.tensors)),
        stats=list(dict.fromkeys(sel.stats)),
        metrics=[m for m in dict.fromkeys(sel.metrics) if ":" not in m],  # ':' = internal blob
        scalars=list(dict.fromkeys(sel.scalars)),
    )
    out: list[dict[str, Any]] = []
    rows = tensor_rows(start_meta)
    known = sum(name in rows for name in sel.tensors)
    points = sel.points if steps is None else min(sel.points, span(sel, steps))
    check_budget(known * len(sel.stats) + len(sel.metrics) + len(sel.scalars), points)
    by_opt: dict[int, list[tuple[str, int]]] = {}
    for name in sel.tensors:
        if name in rows:
            opt, row = rows[name]
            by_opt.setdefault(opt, []).append((name, row))
    for opt, picked in sorted(by_opt.items()):
        for stat in sel.stats:
            block = read_block(
                session, run_id, opt, f"stat:{stat}", [r for _, r in picked], sel.start, sel.end
            )
            for (name, _), values in zip(picked, block.values, strict=True):
                out.append(
                    _item(name, "tensor", block.steps, values, sel.points, stat=stat, optimizer=opt)
                )
    for name in sel.metrics:
        out += metric(session, run_id, name, sel)
    if sel.scalars:
        out += _scalars(session, run_id, sel)
    check_budget(len(out), points)  # a metric may hold many columns
    return out


def span(sel: Selection, steps: int) -> int:
    """How many steps of a run with ``steps`` steps the selection's range can hold."""
    low = max(sel.start if sel.start is not None else 0, 0)
    high = min(sel.end if sel.end is not None else steps, steps)
    return max(high - low + 1, 1)


def metric(session: Session, run_id: str, name: str, sel: Selection) -> list[dict[str, Any]]:
    """Series of a per-step array (``loss``, ``lr``, ...): one per column."""
    block = read_block(session, run_id, sel.optimizer, name, None, sel.start, sel.end)
    steps, values = block.steps, block.values
    if name == "loss":
        has = read_block(session, run_id, sel.optimizer, "has_loss", None, sel.start, sel.end)
        if has.values.shape == values.shape and values.size:
            keep = has.values[0] != 0
            steps, values = steps[keep], values[:, keep]
    many = len(values) > 1
    return [
        _item(
            f"{name}[{i}]" if many else name,
            "metric",
            steps,
            row,
            sel.points,
            optimizer=sel.optimizer,
        )
        for i, row in enumerate(values)
    ]


def _scalars(session: Session, run_id: str, sel: Selection) -> list[dict[str, Any]]:
    out = []
    for wanted in sel.scalars:
        values = read_block(session, run_id, -1, f"scalar:{wanted}", None, sel.start, sel.end)
        has = read_block(session, run_id, -1, f"has:{wanted}", None, sel.start, sel.end)
        if not values.values.size or has.values.shape != values.values.shape:
            continue
        keep = has.values[0] != 0
        out.append(_item(wanted, "scalar", values.steps[keep], values.values[0][keep], sel.points))
    return out
