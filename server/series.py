"""Reading per-step series out of the chunk store, and downsampling them with numpy.

``downsample`` keeps, for each of ``points // 2`` equal buckets of steps, the point with
the smallest and the one with the largest finite value, plus every non-finite point
(NaN, ±Inf) wherever it falls: spikes and NaN onsets stay visible however far a long run
is zoomed out, and the result may exceed ``points`` by the number of non-finite points.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sqlalchemy import and_, select
from sqlmodel import Session, col

from gradwatch.server.errors import RequestError
from gradwatch.server.models import SeriesBlob, SeriesChunk
from gradwatch.server.problems import note

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


def downsample(steps: Vector, values: Vector, points: int) -> tuple[Vector, Vector]:
    """At most ``points`` min/max points (plus every non-finite one), in step order."""
    n = len(values)
    if n <= points:
        return steps, values
    buckets = max(points // 2, 1)
    size = -(-n // buckets)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = values
    grid = padded.reshape(buckets, size)
    finite = np.isfinite(grid)
    offsets = np.arange(buckets) * size
    low = np.where(finite, grid, np.inf).argmin(axis=1) + offsets
    high = np.where(finite, grid, -np.inf).argmax(axis=1) + offsets
    bad = np.flatnonzero(~np.isfinite(values))
    keep = np.unique(np.concatenate([low, high, bad]))
    keep = keep[keep < n]
    return steps[keep], values[keep]


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
        matrix = unpack(data, dtype, nrows, len(steps), f"{name} of run {run_id}")
        if matrix is None:
            continue
        picked = matrix if rows is None else matrix[[r for r in rows if r < nrows]]
        if rows is not None and len(picked) != len(rows):
            continue  # a tensor added later than this chunk (rare): skip the chunk
        mask = (steps >= lo) & (steps <= hi)
        step_parts.append(steps[mask])
        value_parts.append(picked[:, mask].astype(np.float64))
    width = len(rows) if rows is not None else max((len(v) for v in value_parts), default=0)
    if not step_parts:
        return Block(np.zeros(0, dtype=np.int64), np.zeros((width, 0)))
    steps = np.concatenate(step_parts)
    order = np.argsort(steps, kind="stable")
    return Block(steps[order], np.concatenate([_widen(v, width) for v in value_parts], 1)[:, order])


def unpack(data: bytes, dtype: str, rows: int, columns: int, what: str) -> Vector | None:
    """A stored blob as its ``(rows, columns)`` matrix, or None (noted) when it is not one."""
    try:
        kind = np.dtype(dtype).newbyteorder("<")
        if rows < 1 or kind.kind not in "fiub" or len(data) != rows * columns * kind.itemsize:
            raise ValueError(f"{len(data)} bytes of {dtype} are not {rows} × {columns}")
        return np.frombuffer(data, dtype=kind).reshape(rows, columns)
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
    """Tensor name -> (optimizer, row in that optimizer's statistics), from RUN_START."""
    out: dict[str, tuple[int, int]] = {}
    counts: dict[int, int] = {}
    tensors = start_meta.get("tensors", []) if isinstance(start_meta, dict) else None
    if not isinstance(tensors, list):
        note(f"the run's start record has tensors of type {type(tensors).__name__}, not a list")
        return out
    for i, tensor in enumerate(tensors):
        opt = tensor.get("optimizer", 0) if isinstance(tensor, dict) else None
        if not isinstance(opt, int) or isinstance(opt, bool):
            note(f"tensor {i} of the run's start record is unreadable; its rows are left out")
            return out  # rows after it cannot be placed
        row = counts.get(opt, 0)
        counts[opt] = row + 1
        out.setdefault(str(tensor.get("name")), (opt, row))
    return out


def _item(
    name: str, kind: str, steps: Vector, values: Vector, points: int, **extra: Any
) -> dict[str, Any]:
    kept_steps, kept = downsample(steps, values, points)
    return {
        "name": name,
        "kind": kind,
        "steps": kept_steps.tolist(),
        "values": kept.tolist(),
        "total": len(values),
        "downsampled": len(kept) < len(values),
        **extra,
    }


def select_series(
    session: Session, run_id: str, start_meta: dict[str, Any], sel: Selection
) -> list[dict[str, Any]]:
    """The selected series, each downsampled to ``sel.points``; unknown names are skipped."""
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
    check_budget(known * len(sel.stats) + len(sel.metrics) + len(sel.scalars), sel.points)
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
    check_budget(len(out), sel.points)  # a metric may hold many columns
    return out


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
