"""``gradwatch findings`` without RUN gates on the whole job the last ``gradwatch run``
started (every rank and process), resolves "latest" by start time, and writes strict JSON."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch import cli
from gradwatch.checks.findings import finding
from tests.collector.ddp.test_ranks import SCRIPT, TORCHRUN

TWO_PROCESSES = """
import subprocess, sys
import torch
from torch import nn

if len(sys.argv) == 1:  # the parent: one child with a bug, then a later correct one
    for mode in ("stale", "clean"):
        subprocess.run([sys.executable, __file__, mode], check=True)
    sys.exit(0)
torch.manual_seed(0)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(4):
    if sys.argv[1] == "clean":
        opt.zero_grad()
    model(torch.randn(8, 3)).pow(2).mean().backward()
    opt.step()
"""


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADWATCH_")}
    return {**env, "OMP_NUM_THREADS": "1", "GRADWATCH_DIR": str(data_dir)}


def gate(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``gradwatch findings ARGS`` in a child process, as CI runs it."""
    return subprocess.run(
        [sys.executable, "-m", "gradwatch", "findings", *args],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )


def gradwatch_run(data_dir: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradwatch", "run", "--no-lint", "--", *command],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_the_gate_fails_after_a_ddp_job_whose_rank_0_found_a_desync(tmp_path: Path) -> None:
    done = gradwatch_run(tmp_path, *TORCHRUN, str(SCRIPT), "-", "desync")
    assert done.returncode == 0, done.stderr[-3000:]
    gated = gate(tmp_path, "--fail-on", "error")
    assert gated.returncode == 1, gated.stdout + gated.stderr
    summaries = [x for x in gated.stdout.splitlines() if x.startswith("run ")]
    assert len(summaries) == 2  # rank 0 and rank 1, both read
    rank0 = summaries[0].split(":")[0].removeprefix("run ")
    assert summaries[0] == f"run {rank0}: 1 error, 0 warnings, 0 info in 1 incident"
    assert summaries[1].startswith(f"run {rank0}.rank1: 0 errors")
    listed = json.loads(gate(tmp_path, "--json").stdout)
    assert [f["check"] for f in listed] == ["ddp-param-desync"]
    # `gradwatch runs` shows the job once, its other rank under it
    runs = [sys.executable, "-m", "gradwatch", "runs", "--data-dir", str(tmp_path)]
    table = subprocess.run(runs, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()[1:]
    assert len(rows) == 2 and rows[0].startswith(f"{rank0} ")
    assert rows[0].endswith("(job of 2 runs)")
    assert rows[1].startswith(f"  └ rank 1: {rank0}.rank1 ")
    listing = subprocess.run(
        [*runs, "--json"], env=_env(tmp_path), capture_output=True, text=True, timeout=120
    )
    jobs = {r["id"]: r["job"] for r in json.loads(listing.stdout)}
    assert set(jobs) == {rank0, f"{rank0}.rank1"} and len(set(jobs.values())) == 1


def test_the_gate_covers_every_process_of_the_last_invocation(tmp_path: Path) -> None:
    script = tmp_path / "two.py"
    script.write_text(textwrap.dedent(TWO_PROCESSES))
    done = gradwatch_run(tmp_path / "data", sys.executable, str(script))
    assert done.returncode == 0, done.stderr[-3000:]
    gated = gate(tmp_path / "data", "--fail-on", "error")
    # the later process is correct: the newest folder alone would pass
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert [x.split(":")[1] for x in gated.stdout.splitlines() if x.startswith("run ")] == [
        " 1 error, 0 warnings, 0 info in 1 incident",
        " 0 errors, 0 warnings, 0 info",
    ]


def _train(zero_grad: bool) -> gradwatch.Run:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        for _ in range(3):
            if zero_grad:
                opt.zero_grad()
            model(torch.randn(8, 3)).pow(2).mean().backward()
            opt.step()
    return run


def test_latest_is_the_run_started_last_even_within_one_second(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older, newer = _train(zero_grad=False), _train(zero_grad=True)
    time.sleep(0.01)
    # ids of one second sort by their random part: make the newer one sort first
    runs = data_dir / "runs"
    (runs / older.id).rename(runs / "20261201T120000-ffffffff")
    (runs / newer.id).rename(runs / "20261201T120000-00000000")
    assert cli.main(["findings", "--fail-on", "error"]) == 0  # the newer run is correct
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("run 20261201T120000-00000000: 0 errors")


def test_json_is_strict_with_nan_and_infinities_as_strings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        values = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "list": [1.5, math.nan]}
        run.context.sink.report(
            finding("loss-diverging", 1, "loss is NaN.", "look.", details=values)
        )
    assert cli.main(["findings", run.id, "--json"]) == 0
    out = capsys.readouterr().out

    def refuse(token: str) -> Any:
        raise AssertionError(f"bare {token} in --json output")

    (item,) = json.loads(out, parse_constant=refuse)
    assert item["details"] == {
        "nan": "NaN",
        "inf": "Infinity",
        "-inf": "-Infinity",
        "list": [1.5, "NaN"],
    }


def test_the_server_gate_covers_every_run_of_the_newest_job(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gradwatch_server.settings import Settings
    from tests.server.live import live_server

    monkeypatch.setenv("GRADWATCH_JOB", "job-ci")
    broken, clean = _train(zero_grad=False), _train(zero_grad=True)
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'server.db'}", data_dir=data_dir, import_interval=None
    )
    with live_server(settings) as url:
        assert cli.main(["sync", "--server", url, "-q"]) == 0
        capsys.readouterr()
        code = cli.main(["findings", "--server", url, "--fail-on", "error"])
    out = capsys.readouterr().out
    assert code == 1  # the newest run is clean; its job's other run is not
    summaries = [x for x in out.splitlines() if x.startswith("run ")]
    assert [s.split(":")[0] for s in summaries] == [f"run {broken.id}", f"run {clean.id}"]
