"""How long ``gradwatch.open_run`` takes to read a long run as DataFrames, from the local
spool and from a ``gradwatch serve`` on loopback (SQLite), with and without downsampling.

A real run is recorded first (a small MLP, 4 tensors, ``--steps`` SGD steps on the CPU),
then a ``gradwatch serve`` subprocess imports its spool. Each case opens the run afresh
(nothing cached) and reads one table; the median of ``--reps`` reads is reported.

Usage::

    python benchmarks/analysis_read.py                          # 20,000 steps, 3 reps
    python benchmarks/analysis_read.py --steps 2000 --reps 1 --out /tmp/a.json   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradwatch
from gradwatch.core.spool import read_spool

RESULTS = Path(__file__).parent / "results" / "analysis_read.json"


def record(data_dir: Path, steps: int) -> gradwatch.Run:
    """A real run of ``steps`` SGD steps of a 4-tensor MLP."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    with gradwatch.watch(model, opt, project="bench", data_dir=str(data_dir)) as run:
        for _ in range(steps):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            run.log({"metric": 1.0})
    return run


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.loads(reply.read())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(data_dir: Path, run: gradwatch.Run) -> tuple[subprocess.Popen[bytes], str]:
    """``gradwatch serve`` on the data directory, once it holds every frame of ``run``."""
    port = _free_port()
    cmd = [sys.executable, "-m", "gradwatch", "serve", "--data-dir", str(data_dir)]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen([*cmd, "--port", str(port)], **quiet)
    url = f"http://127.0.0.1:{port}"
    frames = len(read_spool(run.dir).frames)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if _get(f"{url}/api/v1/runs/{run.id}")["frames"] == frames:
                return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("the server did not import the run within 300 s")


def cases(run_id: str, url: str, data_dir: Path) -> dict[str, Callable[[], Any]]:
    """What is timed: each opens the run afresh and reads one table."""
    out: dict[str, Callable[[], Any]] = {}
    for where, server in (("local", None), ("server", url)):

        def opened(server: str | None = server) -> gradwatch.analysis.RunData:
            return gradwatch.open_run(run_id, server=server, data_dir=data_dir)

        out[f"{where}: steps"] = lambda o=opened: o().steps
        out[f"{where}: tensors"] = lambda o=opened: o().tensors
        out[f"{where}: tensors, points=1000"] = lambda o=opened: o().read_tensors(points=1000)
        out[f"{where}: steps 1000-1999"] = lambda o=opened: o().read_steps(steps=slice(1000, 1999))
        out[f"{where}: lifecycle"] = lambda o=opened: o().lifecycle
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        run = record(Path(tmp), args.steps)
        print(f"recorded {args.steps:,} steps in {time.perf_counter() - started:.1f} s")
        proc, url = serve(Path(tmp), run)
        try:
            timings = {}
            for name, read in cases(run.id, url, Path(tmp)).items():
                read()  # untimed: the first read imports pandas and warms the caches
                seconds = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    rows = len(read())
                    seconds.append(time.perf_counter() - t0)
                timings[name] = {"median_s": statistics.median(seconds), "rows": rows}
                print(f"{name:<34} {statistics.median(seconds):8.3f} s  {rows:>9,} rows")
        finally:
            proc.terminate()
            proc.wait(30)
    result = {
        "steps": args.steps,
        "tensors": 4,
        "reps": args.reps,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "load_average_1min": os.getloadavg()[0],  # a shared machine inflates every time
        "command": " ".join(["python", *sys.argv]),
        "timings": timings,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# Reading a {args.steps:,}-step run (4 tensors) with gradwatch.open_run",
        "",
        f"Command: `{result['command']}` (median of {args.reps} reads after one untimed; server: "
        "`gradwatch serve`, SQLite, loopback; "
        f"{result['machine']}, 1-minute load average "
        f"{result['load_average_1min']:.1f} at the end).",
        "",
        "| read | median | rows |",
        "|---|---:|---:|",
        *(f"| {k} | {v['median_s']:.3f} s | {v['rows']:,} |" for k, v in timings.items()),
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
