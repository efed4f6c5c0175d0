"""Reads a run back from the local data directory, without any server.

Used by the CLI (``gradwatch findings`` and friends read runs locally), the examples and
tests. Example::

    from gradwatch.core.local_reader import latest_run, load_run
    run = load_run(latest_run())
    for row in run.steps[0]:
        print(row.step, row.loss, run.tensor_names[0], row.stats[0][0])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradwatch.core import paths
from gradwatch.core.records import StepsChunk, decode
from gradwatch.core.spool import list_segments, read_spool


@dataclass
class StepRow:
    """One collected optimizer step, decoded."""

    step: int
    loss: float | None
    n_backward: int
    lr: list[float]
    wall_time: float
    phases: list[float]  # forward, backward, step seconds
    events: list[tuple[str, float, str]]
    has_grad: list[bool]
    stats: list[list[float]]  # per tensor: grad_norm, param_norm, update_norm, nonfinite_grad
    batch_hash: str | None


@dataclass
class LocalRun:
    """Everything spooled for one run."""

    id: str
    dir: Path
    start: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    end: dict[str, Any] | None = None
    steps: dict[int, list[StepRow]] = field(default_factory=dict)
    scalars: list[tuple[int, str, float]] = field(default_factory=list)
    records: int = 0
    torn_tail_bytes: int = 0
    corrupt_frames: int = 0

    @property
    def tensor_names(self) -> list[str]:
        """Names of the parameter tensors, in the order of the statistics rows."""
        return [t["name"] for t in self.start.get("tensors", [])]

    def tensors_of(self, optimizer: int) -> list[str]:
        """Names of the tensors of one optimizer, in the order of its statistics rows."""
        return [t["name"] for t in self.start.get("tensors", []) if t["optimizer"] == optimizer]


def _rows(chunk: StepsChunk) -> list[StepRow]:
    """One StepRow per step of a decoded STEPS record."""
    b = chunk.blobs
    stats = [b[f"stat:{name}"] for name in chunk.stats]
    width = len(stats[0]) if stats else len(b.get("has_grad", ()))
    return [
        StepRow(
            step=int(step),
            loss=float(b["loss"][0][i]) if b["has_loss"][0][i] else None,
            n_backward=int(b["n_backward"][0][i]),
            lr=[float(x) for x in b["lr"][:, i]],
            wall_time=float(b["wall_time"][0][i]),
            phases=[float(x) for x in b["phases"][:, i]],
            events=[(str(e[0]), float(e[1]), str(e[2])) for e in chunk.events[i]],
            has_grad=[bool(x) for x in b["has_grad"][:, i]],
            stats=[[float(s[j][i]) for s in stats] for j in range(width)],
            batch_hash=chunk.batch_hash[i],
        )
        for i, step in enumerate(chunk.steps.tolist())
    ]


def load_run(run_dir: Path) -> LocalRun:
    """Every record spooled for the run in ``run_dir``, decoded by
    :func:`gradwatch.core.records.decode`."""
    read = read_spool(run_dir)
    decoded = decode(read.frames)
    return LocalRun(
        id=run_dir.name,
        dir=run_dir,
        start=decoded.start,
        fingerprint=decoded.fingerprint,
        end=decoded.end,
        steps={opt: [r for c in chunks for r in _rows(c)] for opt, chunks in decoded.steps.items()},
        scalars=[p for chunk in decoded.scalars for p in chunk.points()],
        records=decoded.records,
        torn_tail_bytes=read.torn_tail_bytes,
        corrupt_frames=read.corrupt_frames,
    )


def list_runs(data_dir: Path | None = None) -> list[Path]:
    """Run folders in the data directory, oldest first (run ids sort by start time)."""
    root = paths.runs_dir(paths.data_dir(data_dir))
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and list_segments(p))


def latest_run(data_dir: Path | None = None) -> Path:
    """The most recent run folder; ``FileNotFoundError`` with a hint when there is none."""
    from gradwatch.core.jobs import recent_runs  # ordered by start time, not by id

    runs = [r.dir for r in recent_runs(paths.data_dir(data_dir))]
    if not runs:
        raise FileNotFoundError(
            f"no runs in {paths.runs_dir(paths.data_dir(data_dir))}; train with "
            "gradwatch.watch(...) first, or pass --data-dir / set GRADWATCH_DIR"
        )
    return runs[-1]
