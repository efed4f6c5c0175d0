"""The demo's runs as ``gradwatch demo --no-serve`` records them (real training
subprocesses, no server): shared by the dashboard's tests and the torch-free server test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def record_demo(root: Path, steps: int, jobs: int) -> Path:
    """``gradwatch demo --no-serve`` into the data directory ``root``: its five runs of
    ``steps`` steps, ``jobs`` trainings at a time; ``root``."""
    cmd = [sys.executable, "-m", "gradwatch", "demo", "--no-serve", "--data-dir", str(root)]
    cmd += ["--steps", str(steps), "--jobs", str(jobs)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return root
