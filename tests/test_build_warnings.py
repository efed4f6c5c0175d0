"""Building gradwatch (what ``make demo`` does through ``pip install -e .``) prints no
setuptools warnings: the licence is an SPDX string and every shipped folder is a package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_build_prints_no_setuptools_warnings(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path), str(ROOT)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    for noise in ("SetuptoolsDeprecationWarning", "is absent from the `packages`"):
        assert noise not in log, [line for line in log.splitlines() if noise in line]
    (wheel,) = tmp_path.glob("gradwatch-*.whl")
    assert wheel.stat().st_size > 0
