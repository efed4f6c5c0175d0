"""Shared fixtures: an isolated data directory and a reader for a run's spooled records."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradwatch.core.spool import read_spool
from gradwatch.core.wire import Kind, Record


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own GRADWATCH_DIR and no server from the environment."""
    root = tmp_path / "gradwatch-data"
    monkeypatch.setenv("GRADWATCH_DIR", str(root))
    for var in (
        "GRADWATCH_SERVER",
        "GRADWATCH_CHECKS",
        "GRADWATCH_TOKEN",
        "GRADWATCH_PROJECT",
        "GRADWATCH_NAME",
        "GRADWATCH_ACCUMULATION_STEPS",
        "GRADWATCH_JOB",
    ):
        monkeypatch.delenv(var, raising=False)
    return root


def records(run_dir: Path, kind: Kind | None = None) -> list[Record]:
    """Every record spooled for a run (optionally of one kind), in sequence order."""
    read = read_spool(run_dir)
    assert read.torn_tail_bytes == 0 and read.corrupt_frames == 0
    return [f.record for f in read.frames if kind is None or f.record.kind == kind]


@pytest.fixture(scope="session")
def drift_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The drift tests' real training runs (one process each), trained once per session:
    their data directory and the run id of each variant (see tests/collector/drift_runs.py)."""
    from tests.collector.drift_runs import cached_or_trained

    return cached_or_trained(tmp_path_factory.mktemp("drift-data"))
