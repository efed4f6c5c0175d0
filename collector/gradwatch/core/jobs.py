"""Jobs: the runs one launch created (every rank and process of ``gradwatch run``/torchrun).

Every RUN_START carries ``job``: the id ``gradwatch run`` gave its invocation
(``$GRADWATCH_JOB``), else torchrun's ``$TORCHELASTIC_RUN_ID`` when it names one, else the
DDP group (rank 0's run id), else the run's own id. Readers order runs by their RUN_START
time (run ids have one-second resolution, so two runs started 0.23 s apart sort by their
random part) and treat "the latest" as every run of the latest run's job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gradwatch.core import paths
from gradwatch.core.spool import list_segments, read_start

ENV_JOB: Final = "GRADWATCH_JOB"
JOB_MAX: Final = 128  # the server's column width
#: how many of the newest run folders are read to find the latest job (one frame each)
RECENT: Final = 256


def job_id(run_id: str, ddp_group: str | None) -> str:
    """The job of a run starting now in this process (see the module's docstring)."""
    explicit = os.environ.get(ENV_JOB, "").strip()
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if not explicit and elastic != "none":  # torchrun's default when --rdzv-id is not given
        explicit = elastic
    return explicit[:JOB_MAX] if explicit else (ddp_group or run_id)


@dataclass(frozen=True)
class RunInfo:
    """What ordering and grouping need from a run's RUN_START."""

    dir: Path
    started_at: float
    job: str
    rank: int | None
    #: the name the run was given (``run_name=``, ``$GRADWATCH_NAME``), else its id
    name: str = ""


def run_info(run_dir: Path) -> RunInfo:
    """The job, start time and rank of the run in ``run_dir`` (its first frame only). A run
    whose RUN_START cannot be read is its own job, ordered by its id's time."""
    meta = read_start(run_dir)
    started = meta.get("started_at")
    ddp = meta.get("ddp") if isinstance(meta.get("ddp"), dict) else {}
    return RunInfo(
        dir=run_dir,
        started_at=float(started) if isinstance(started, (int, float)) else 0.0,
        job=str(meta.get("job") or (ddp or {}).get("group") or run_dir.name),
        rank=(ddp or {}).get("rank"),
        name=str(meta.get("name") or run_dir.name),
    )


def recent_runs(root: Path) -> list[RunInfo]:
    """The newest run folders of the data directory ``root``, oldest first by start time."""
    base = paths.runs_dir(root)
    if not base.is_dir():
        return []
    dirs = sorted(p for p in base.iterdir() if p.is_dir() and list_segments(p))[-RECENT:]
    infos = [run_info(d) for d in dirs]
    return sorted(infos, key=lambda r: (r.started_at, r.dir.name))


def resolve(root: Path, text: str) -> tuple[list[RunInfo], str]:
    """The runs ``text`` names among the newest run folders of ``root``, and how: an id or a
    name matched exactly (``"exact"``; several runs may share a name, newest last), else the
    runs whose id or name starts with ``text`` (``"prefix"``). ``([], "")`` if none does."""
    runs = recent_runs(root)
    exact = [r for r in runs if text in (r.dir.name, r.name)]
    if exact:
        return exact, "exact"
    prefix = [r for r in runs if r.dir.name.startswith(text) or r.name.startswith(text)]
    return (prefix, "prefix") if prefix else ([], "")


def latest_job(root: Path) -> list[Path]:
    """Every run of the latest run's job, rank 0 (or the earliest) first; ``[]`` if none."""
    runs = recent_runs(root)
    if not runs:
        return []
    job = runs[-1].job
    members = [r for r in runs if r.job == job]
    members.sort(key=lambda r: (r.rank if r.rank is not None else -1, r.started_at))
    return [r.dir for r in members]


def by_job(runs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """API run objects grouped by ``job``, in the order of each job's first run; rank 0
    (or the first started) leads its job (``gradwatch runs`` and the dashboard's list)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        out.setdefault(str(r.get("job") or r["id"]), []).append(r)
    return [
        sorted(members, key=lambda r: (r.get("rank") or 0, r.get("started") or 0.0))
        for members in out.values()
    ]
