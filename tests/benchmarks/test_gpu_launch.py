"""``benchmarks/gpu_launch.py``: no GPU, no measurement; on the CPU, a smoke run of every
code path but the CUDA timing; ``gpu_all.sh`` stops before measuring without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
NO_CUDA = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=NO_CUDA, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )


def test_without_a_gpu_it_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "gpu_launch"
    done = _run([sys.executable, str(BENCHMARKS / "gpu_launch.py"), "--out", str(out)], tmp_path)
    assert done.returncode == 2
    assert "no CUDA GPU here; nothing measured" in done.stderr
    assert not list(tmp_path.iterdir())


def test_gpu_all_says_why_it_measures_nothing_without_a_gpu(tmp_path: Path) -> None:
    env = {**NO_CUDA, "PYTHON": sys.executable}
    script = str(BENCHMARKS / "gpu_all.sh")
    done = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "no CUDA GPU here" in done.stderr
    assert "gpu_launch" not in done.stdout


def test_cpu_smoke_run_writes_both_variants(tmp_path: Path) -> None:
    out = tmp_path / "gl"
    script = str(BENCHMARKS / "gpu_launch.py")
    cmd = [sys.executable, script, "--device", "cpu", "--steps", "2", "--reps", "2"]
    done = _run([*cmd, "--settle", "1", "--layers", "3", "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert {len(b) for b in report["blocks"].values()} == {2}
    wall = report["summary"]["wall_ms"]
    assert wall["plain"] > 0 and wall["gradwatch"] > 0
    assert report["summary"]["busy_ms"] is None  # CUDA-only
    assert "| wall_ms |" in out.with_suffix(".md").read_text()
    assert "gradwatch: [" not in done.stderr  # the model is healthy: no finding
