"""Smoke runs of the benchmark scripts: each in a subprocess, as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def quick_run(script: str, out: Path) -> None:
    """``python benchmarks/SCRIPT --quick --out OUT``, which must exit 0."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
