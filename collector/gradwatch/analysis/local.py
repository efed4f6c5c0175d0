"""Reading a run from its spool folder, without any server.

The spool is decoded once into the layout the server stores (per optimizer, chunks of
steps with one ``(rows, n)`` matrix per array), and selections are answered the way the
server's ``/series`` endpoint answers them, so both sources give the same series.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gradwatch.analysis.selection import INCIDENT_KEYS, Selection, Series, thinned
from gradwatch.commands.findings import public
from gradwatch.core.contract import DEFAULT_PROJECT
from gradwatch.core.downsample import Vector
from gradwatch.core.records import (
    SCALARS_OPTIMIZER,
    ScalarsChunk,
    StepsChunk,
    decode,
    tensor_rows,
)
from gradwatch.core.spool import read_spool

SCALARS = SCALARS_OPTIMIZER  # the optimizer number the server files user scalars under
Chunk = StepsChunk | ScalarsChunk


class LocalSource:
    """A run folder in the data directory (see :mod:`gradwatch.core.spool`)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.run_id = run_dir.name
        self.where = str(run_dir)
        decoded = decode(read_spool(run_dir).frames)
        self.start: dict[str, Any] = decoded.start
        self.end: dict[str, Any] | None = decoded.end
        self.fingerprint: dict[str, Any] = decoded.fingerprint
        self.chunks: dict[int, list[Chunk]] = {
            opt: list(chunks) for opt, chunks in decoded.steps.items() if chunks
        }
        if decoded.scalars:
            self.chunks[SCALARS] = list(decoded.scalars)
        self.keys: dict[str, None] = dict.fromkeys(decoded.scalar_keys)
        self._findings = decoded.findings

    def info(self) -> dict[str, Any]:
        """What the run's records say about it (status ``unfinished`` without an END)."""
        steps = [int(c.steps.max()) for c in self.chunks.get(0, [])]
        return {
            "id": self.run_id,
            "project": self.start.get("project") or DEFAULT_PROJECT,
            "name": self.start.get("name") or self.run_id,
            "status": (self.end or {}).get("status", "unfinished"),
            "steps": max(steps, default=0),
            "start": self.start,
            "fingerprint": self.fingerprint,
            "end": self.end,
        }

    def block(
        self, optimizer: int, name: str, rows: list[int] | None, sel: Selection
    ) -> tuple[Vector, Vector]:
        """Rows ``rows`` (all if None) of array ``name`` over the selected steps, by step."""
        lo = -(1 << 63) if sel.start is None else sel.start
        hi = (1 << 63) - 1 if sel.end is None else sel.end
        step_parts, value_parts = [], []
        for chunk in self.chunks.get(optimizer, []):
            matrix = chunk.blobs.get(name)
            if matrix is None:
                continue
            if rows is not None:
                if max(rows, default=-1) >= len(matrix):
                    continue  # a tensor added later than this chunk
                matrix = matrix[rows]
            mask = (chunk.steps >= lo) & (chunk.steps <= hi)
            step_parts.append(chunk.steps[mask])
            value_parts.append(matrix[:, mask])
        if not step_parts:
            width = len(rows) if rows is not None else 0
            return np.zeros(0, dtype=np.int64), np.zeros((width, 0))
        steps = np.concatenate(step_parts)
        order = np.argsort(steps, kind="stable")
        return steps[order], _padded(value_parts)[:, order]

    def series(self, sel: Selection) -> list[Series]:
        """The selected series, as the server's ``/series`` endpoint answers."""
        rows = tensor_rows(self.start)
        out: list[Series] = []
        by_opt: dict[int, list[tuple[str, int]]] = {}
        for name in sel.tensors:
            if name in rows:
                by_opt.setdefault(rows[name][0], []).append((name, rows[name][1]))
        for opt, picked in sorted(by_opt.items()):
            for stat in sel.stats:
                steps, values = self.block(opt, f"stat:{stat}", [r for _, r in picked], sel)
                out += [
                    Series(name, "tensor", steps, row, stat)
                    for (name, _), row in zip(picked, values, strict=True)
                ]
        for name in sel.metrics:
            out += self._metric(name, sel)
        for key in sel.scalars:
            steps, values = self.block(SCALARS, f"scalar:{key}", None, sel)
            _, has = self.block(SCALARS, f"has:{key}", None, sel)
            if values.size and has.shape == values.shape:
                keep = has[0] != 0
                out.append(Series(key, "scalar", steps[keep], values[0][keep]))
        return [thinned(s, sel.points) for s in out]

    def _metric(self, name: str, sel: Selection) -> list[Series]:
        steps, values = self.block(sel.optimizer, name, None, sel)
        if name == "loss":
            _, has = self.block(sel.optimizer, "has_loss", None, sel)
            if has.shape == values.shape and values.size:
                steps, values = steps[has[0] != 0], values[:, has[0] != 0]
        many = len(values) > 1
        return [
            Series(f"{name}[{i}]" if many else name, "metric", steps, row)
            for i, row in enumerate(values)
        ]

    def scalar_names(self) -> list[str]:
        """Keys logged with ``run.log``, in first-logged order."""
        return list(self.keys)

    def findings(self) -> list[dict[str, Any]]:
        """The spooled findings (lint findings marked as the CLI marks them)."""
        from gradwatch.core.confirm import mark

        spooled = [{"run": self.run_id, **f} for f in self._findings]
        return [public(f) | _extra(f) for f in mark(spooled)]

    def lifecycle(self, optimizer: int, start: int, end: int) -> list[dict[str, Any]]:
        """``{step, n_backward, events}`` for each recorded step in ``[start, end]``."""
        out = []
        for chunk in self.chunks.get(optimizer, []):
            if not isinstance(chunk, StepsChunk):
                continue  # user scalars have no lifecycle
            passes = chunk.blobs.get("n_backward")
            for i, step in enumerate(chunk.steps.tolist()):
                if start <= step <= end:
                    n = None if passes is None else int(passes[0][i])
                    events = chunk.events[i] if i < len(chunk.events) else []
                    out.append({"step": step, "n_backward": n, "events": events})
        out.sort(key=lambda r: int(r["step"]))
        return out


def _extra(finding: dict[str, Any]) -> dict[str, Any]:
    """The incident fields, for findings that carry them."""
    return {k: finding[k] for k in INCIDENT_KEYS if k in finding}


def _padded(parts: list[Vector]) -> Vector:
    """Matrices of possibly different row counts side by side (missing rows: NaN), e.g. a
    parameter group added mid-run."""
    width = max(p.shape[0] for p in parts)
    return np.concatenate(
        [np.vstack([p, np.full((width - p.shape[0], p.shape[1]), np.nan)]) for p in parts], axis=1
    )
