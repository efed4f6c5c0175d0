"""``benchmarks/gpu_sync.py`` where there is no GPU: it says so and measures nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu_sync.py"


def test_without_a_gpu_it_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = tmp_path / "gpu_sync"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "no CUDA GPU here; nothing measured" in done.stderr
    assert not list(tmp_path.iterdir())
