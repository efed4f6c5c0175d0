"""The ``gradwatch`` command: ``--version``, ``--help`` everywhere, ``sync``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch import cli


def gradwatch_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradwatch", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    out = gradwatch_cmd("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"gradwatch {gradwatch.__version__}"


def test_every_subcommand_has_help() -> None:
    parser = cli.build_parser()
    subactions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    names = list(subactions[0].choices) if subactions else []  # type: ignore[attr-defined]
    assert "sync" in names
    for name in names:
        out = gradwatch_cmd(name, "--help")
        assert out.returncode == 0, out.stderr
        assert f"usage: gradwatch {name}" in out.stdout


def test_sync_without_server_explains_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GRADWATCH_SERVER", raising=False)
    out = gradwatch_cmd("sync")
    assert out.returncode == 2
    assert "--server" in out.stderr


def test_sync_against_an_unreachable_server_reports_and_keeps_the_data(data_dir: Path) -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt) as run:
        opt.zero_grad()
        model(torch.randn(3, 2)).sum().backward()
        opt.step()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradwatch",
            "sync",
            "--server",
            "http://127.0.0.1:9",
            "--attempts",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "GRADWATCH_DIR": str(data_dir)},
    )
    assert out.returncode == 1
    assert f"run {run.id} not fully sent" in out.stderr
    assert "gradwatch sync" in out.stderr and "again" in out.stderr
    assert any(run.dir.glob("spool-*.gws"))
