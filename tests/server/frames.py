"""Builders of wire frames as the collector writes them, for server tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gradwatch.core.wire import SCHEMA_VERSION, Array, Kind, Record, encode_frame

STATS = ["grad_norm", "param_norm", "update_norm", "nonfinite_grad"]
HEADERS = {"X-Gradwatch-Schema": str(SCHEMA_VERSION)}


def headers(run: str, **extra: str) -> dict[str, str]:
    """Ingest headers for ``run``."""
    return {**HEADERS, "X-Gradwatch-Run": run, **extra}


def start(
    run: str, project: str = "default", tensors: Sequence[str] = ("w", "b"), **meta: Any
) -> Record:
    """A RUN_START record with one optimizer over ``tensors``."""
    return Record(
        Kind.RUN_START,
        {
            "run": run,
            "project": project,
            "name": meta.pop("name", run),
            "tags": meta.pop("tags", []),
            "config_hash": meta.pop("config_hash", "cfg1"),
            "started_at": meta.pop("started_at", 1_700_000_000.0),
            "pid": meta.pop("pid", 1),
            "host": meta.pop("host", "elsewhere"),
            "stats": STATS,
            "tensors": [{"name": t, "optimizer": 0} for t in tensors],
            **meta,
        },
    )


def steps(
    first: int,
    stats: np.ndarray[Any, Any],
    loss: Sequence[float] | None = None,
    optimizer: int = 0,
    dtype: str = "f4",
) -> Record:
    """A STEPS record for steps ``first ..``; ``stats`` is ``(n, tensors, 4)`` of ``dtype``."""
    n = stats.shape[0]
    loss_values = np.asarray(loss if loss is not None else np.arange(n, dtype=float), dtype="<f4")
    return Record(
        Kind.STEPS,
        {
            "optimizer": optimizer,
            "stats": STATS,
            "events": [[] for _ in range(n)],
            "batch_hash": [None] * n,
        },
        {
            "step": Array.from_buffer(
                "i8", (n,), np.arange(first, first + n, dtype="<i8").tobytes()
            ),
            "loss": Array.from_buffer("f4", (n,), loss_values.tobytes()),
            "has_loss": Array.from_buffer("u1", (n,), np.ones(n, dtype="u1").tobytes()),
            "stats": Array.from_buffer(
                dtype, stats.shape, np.ascontiguousarray(stats, dtype="<" + dtype).tobytes()
            ),
        },
    )


def end(status: str = "finished", steps_done: int = 0) -> Record:
    """An END record."""
    return Record(Kind.END, {"status": status, "ended_at": 1_700_000_100.0, "steps": [steps_done]})


def frames(records: Sequence[Record], first_seq: int = 1) -> list[bytes]:
    """Each record as a frame, seq counting from ``first_seq``."""
    return [encode_frame(first_seq + i, r) for i, r in enumerate(records)]


def simple_run(run: str, n: int = 10, tensors: int = 2, project: str = "default") -> list[bytes]:
    """Frames of a small finished run: start, two STEPS windows, a heartbeat, end."""
    names = [f"t{i}" for i in range(tensors)]
    rng = np.random.default_rng(0)
    stats = rng.random((n, tensors, 4), dtype=np.float32)
    half = n // 2
    records = [
        start(run, project, names),
        steps(1, stats[:half]),
        steps(1 + half, stats[half:]),
        Record(Kind.HEARTBEAT, {"t": 1_700_000_050.0, "steps": [n]}),
        end(steps_done=n),
    ]
    return frames(records)


def read_requests(run: str, tensors: Sequence[str] = ()) -> list[tuple[str, dict[str, Any]]]:
    """Every read route of the API, aimed at ``run`` (paths with their query parameters)."""
    base = f"/api/v1/runs/{run}"
    names = list(tensors) or ["w"]
    return [
        ("/api/v1/runs", {}),
        (base, {}),
        (f"{base}/findings", {}),
        (f"{base}/series", {"tensor": names, "stat": STATS, "metric": ["loss", "lr"]}),
        (f"{base}/series", {"metric": ["max:steps", "has_loss", "n_backward"], "scalar": "acc"}),
        (f"{base}/overview", {}),
        (f"{base}/overview", {"stat": "nonfinite_grad", "optimizer": 1}),
        (f"{base}/lifecycle", {}),
        (f"{base}/lifecycle", {"start": 0, "limit": 5}),
        ("/api/v1/compare", {"a": run, "b": run}),
        ("/api/v1/groups", {}),
        ("/api/v1/alerts", {"run": run}),
    ]
