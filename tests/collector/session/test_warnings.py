"""gradwatch leaves a script's warnings as they are: each keeps its own source line
(PyTorch's broadcast warning names the user's line, not gradwatch's loss wrapper) and its
show-once state (nothing printed twice, nothing the script would not print)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "user_warnings.py"


def _stderr(cmd: list[str], data: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADWATCH_")}
    env["GRADWATCH_DIR"] = str(data)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=True)
    # gradwatch's own lines are not the script's
    return [line for line in done.stderr.splitlines() if not line.startswith("gradwatch")]


def test_the_script_alone_prints_what_the_test_expects(tmp_path: Path) -> None:
    lines = _stderr([sys.executable, str(SCRIPT)], tmp_path)
    assert sum("UserWarning: a warning shown once" in x for x in lines) == 1
    broadcast = [x for x in lines if "UserWarning: Using a target size" in x]
    line = next(i for i, x in enumerate(SCRIPT.read_text().splitlines(), 1) if "(8, 1)" in x)
    assert broadcast[0].startswith(f"{SCRIPT}:{line}:")  # the user's F.mse_loss line


@pytest.mark.slow
def test_stderr_is_the_same_under_gradwatch_run(tmp_path: Path) -> None:
    alone = _stderr([sys.executable, str(SCRIPT)], tmp_path / "a")
    cmd = [sys.executable, "-m", "gradwatch", "run", "--", sys.executable, str(SCRIPT)]
    assert _stderr(cmd, tmp_path / "b") == alone


@pytest.mark.slow
def test_stderr_is_the_same_with_watch_called_by_the_script(tmp_path: Path) -> None:
    alone = _stderr([sys.executable, str(SCRIPT)], tmp_path / "a")
    watched = _stderr([sys.executable, str(SCRIPT), str(tmp_path / "runs")], tmp_path / "b")
    assert watched == alone
