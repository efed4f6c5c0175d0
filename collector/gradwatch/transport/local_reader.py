"""Reads a run back from the local data directory, without any server.

Used by the CLI (``gradwatch findings`` and friends read runs locally), the examples and
tests. Example::

    from gradwatch.transport.local_reader import latest_run, load_run
    run = load_run(latest_run())
    for row in run.steps[0]:
        print(row.step, row.loss, run.tensor_names[0], row.stats[0][0])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradwatch import paths
from gradwatch.transport.spool import list_segments, read_spool
from gradwatch.wire import Kind, Record


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


def _rows(rec: Record) -> list[StepRow]:
    a = {k: v.to_list() for k, v in rec.arrays.items()}
    n = len(a["step"])
    t = rec.arrays["stats"].shape[1] if n else 0
    g = rec.arrays["lr"].shape[1] if n else 0
    flat = a["stats"]
    return [
        StepRow(
            step=int(a["step"][i]),
            loss=float(a["loss"][i]) if a["has_loss"][i] else None,
            n_backward=int(a["n_backward"][i]),
            lr=[float(x) for x in a["lr"][i * g : (i + 1) * g]],
            wall_time=float(a["wall_time"][i]),
            phases=[float(x) for x in a["phases"][i * 3 : (i + 1) * 3]],
            events=[(str(e[0]), float(e[1]), str(e[2])) for e in rec.meta["events"][i]],
            has_grad=[bool(x) for x in a["has_grad"][i * t : (i + 1) * t]],
            stats=[
                [float(x) for x in flat[(i * t + j) * 4 : (i * t + j + 1) * 4]] for j in range(t)
            ],
            batch_hash=rec.meta["batch_hash"][i],
        )
        for i in range(n)
    ]


def load_run(run_dir: Path) -> LocalRun:
    """Decode every record spooled for the run in ``run_dir``."""
    read = read_spool(run_dir)
    run = LocalRun(
        id=run_dir.name,
        dir=run_dir,
        records=len(read.frames),
        torn_tail_bytes=read.torn_tail_bytes,
        corrupt_frames=read.corrupt_frames,
    )
    for frame in read.frames:
        rec = frame.record
        if rec.kind == Kind.RUN_START:
            run.start = rec.meta
        elif rec.kind == Kind.FINGERPRINT:
            run.fingerprint.update({k: v for k, v in rec.meta.items() if k != "phase"})
        elif rec.kind == Kind.STEPS:
            run.steps.setdefault(int(rec.meta["optimizer"]), []).extend(_rows(rec))
        elif rec.kind == Kind.SCALARS:
            keys = rec.meta["keys"]
            run.scalars += [
                (int(s), keys[int(k)], float(v))
                for s, k, v in zip(
                    rec.arrays["step"].to_list(),
                    rec.arrays["key"].to_list(),
                    rec.arrays["value"].to_list(),
                    strict=True,
                )
            ]
        elif rec.kind == Kind.END:
            run.end = rec.meta
    return run


def list_runs(data_dir: Path | None = None) -> list[Path]:
    """Run folders in the data directory, oldest first (run ids sort by start time)."""
    root = paths.runs_dir(paths.data_dir(data_dir))
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and list_segments(p))


def latest_run(data_dir: Path | None = None) -> Path:
    """The most recent run folder; ``FileNotFoundError`` with a hint when there is none."""
    from gradwatch.transport.jobs import recent_runs  # ordered by start time, not by id

    runs = [r.dir for r in recent_runs(paths.data_dir(data_dir))]
    if not runs:
        raise FileNotFoundError(
            f"no runs in {paths.runs_dir(paths.data_dir(data_dir))}; train with "
            "gradwatch.watch(...) first, or pass --data-dir / set GRADWATCH_DIR"
        )
    return runs[-1]
