"""Ingest throughput of ``gradwatch serve`` next to MLflow's tracking server, over real HTTP
on loopback, for the same values: per-step gradient norms of ``--tensors`` (300) tensors
from ``--runs`` (8) concurrent runs (one thread each), ``--steps`` steps per run.

Four phases, each on a fresh server with a fresh SQLite database:

* ``gradwatch per step``  one STEPS frame per step (300 norms + the step's loss), sent with
  the collector's own ``HTTPTransport`` (benchmarks/ingest.py's frames and sender);
* ``gradwatch batched``   one frame per ``--steps-per-frame`` (50) steps, as the collector
  sends them;
* ``mlflow per step``     ``MlflowClient.log_batch`` of 300 metrics per call;
* ``mlflow batched``      ``log_batch`` of as many whole steps as MLflow's limit of 1,000
  metrics per call allows (3 steps, 900 metrics).

gradwatch's frames are encoded and MLflow's ``Metric`` lists built before the clock starts;
MLflow's client still turns its lists into JSON inside the clock (that is its API). Both
servers run with their defaults (``gradwatch serve``: one process; ``mlflow server``:
uvicorn with 4 workers). Reported: values/s over the phase (first request to last reply),
p50/p99 request latency, and the CPU seconds of the server's process tree and of the
client process. Each phase then checks that the server holds every step of a run.

Usage (in the venv that ``make bench-peers`` builds)::

    python benchmarks/ingest_peers.py                   # full run, ~4 min on 2 idle cores
    python benchmarks/ingest_peers.py --quick --out /tmp/i.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_overhead as core
import ingest
import proctree

from gradwatch.transport.sender import INGEST_PATH, HTTPTransport

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "ingest_peers.json"
MLFLOW_MAX_METRICS = 1000  # MLflow's limit of metrics per log_batch call
STATS = ["grad_norm"]
LONG_FRAME = 50  # steps per frame of the long gradwatch phase


class MlflowServer:
    """``mlflow server`` on a free loopback port with a SQLite backend, in its own process
    group (its uvicorn workers are stopped with it)."""

    def __init__(self, tmp: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}"]
        cmd += ["--default-artifact-root", str(tmp / "artifacts")]
        self.log = (tmp / "mlflow-server.log").open("w")
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"mlflow server did not start: {(tmp / 'mlflow-server.log').read_text()}"
        )

    def replies(self) -> dict[str, int]:
        """log-batch replies by HTTP status, from the server's access log."""
        out: dict[str, int] = {}
        for line in Path(self.log.name).read_text().splitlines():
            if "/runs/log-batch" in line and '" ' in line:
                status = line.rsplit('" ', 1)[1].split()[0]
                out[status] = out.get(status, 0) + 1
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        self.log.close()


def server_cpu_s(pid: int) -> float:
    """CPU seconds of a server process and its workers."""
    return proctree.cpu_s(pid) + proctree.descendants_cpu_s(pid)


def run_phase(
    label: str,
    senders: list[Callable[[list[float]], None]],
    values: int,
    per_request: int,
    server_pid: int,
) -> dict[str, Any]:
    """Start one thread per sender at once; time them, printing progress every 5 s."""
    latencies: list[float] = []
    start, done = threading.Barrier(len(senders) + 1), threading.Event()

    def worker(send: Callable[[list[float]], None]) -> None:
        start.wait()
        send(latencies)

    threads = [threading.Thread(target=worker, args=(s,)) for s in senders]
    for t in threads:
        t.start()
    s0, c0 = server_cpu_s(server_pid), time.process_time()
    start.wait()
    t0 = time.perf_counter()
    reporter = threading.Thread(
        target=_progress, args=(label, latencies, per_request, values, t0, done)
    )
    reporter.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done.set()
    reporter.join()
    lat = sorted(latencies)
    result = {
        "phase": label,
        "values": values,
        "values_per_request": per_request,
        "requests": len(lat),
        "seconds": round(wall, 3),
        "values_per_s": round(values / wall),
        "latency_p50_ms": round(1000 * lat[len(lat) // 2], 1),
        "latency_p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1),
        "server_cpu_s": round(server_cpu_s(server_pid) - s0, 2),
        "client_cpu_s": round(time.process_time() - c0, 2),
    }
    print(f"[{label}] {result['values_per_s']:,} values/s over {wall:.1f} s", flush=True)
    return result


def _progress(
    label: str, latencies: list[float], per: int, total: int, t0: float, done: threading.Event
) -> None:
    while not done.wait(5.0):
        sent = len(latencies) * per
        rate = sent / (time.perf_counter() - t0)
        print(f"[{label}] {sent:,}/{total:,} values, {rate:,.0f}/s", flush=True)


# -- gradwatch serve -------------------------------------------------------------------------


def _gradwatch_sender(url: str, run: str, bodies: list[bytes]) -> Callable[[list[float]], None]:
    """Post the run's start frame now; the returned sender posts its STEPS frames."""
    transport = HTTPTransport(url)
    transport.post(INGEST_PATH, bodies[0], ingest.headers(run), 60)

    def send(latencies: list[float]) -> None:
        for body in bodies[1:]:
            t0 = time.perf_counter()
            reply = transport.post(INGEST_PATH, body, ingest.headers(run), 120)
            latencies.append(time.perf_counter() - t0)
            if reply.status != 200:
                raise RuntimeError(f"HTTP {reply.status}: {reply.body[:200]!r}")
        transport.close()

    return send


def gradwatch_phase(
    args: argparse.Namespace, per_frame: int, tmp: Path, steps: int = 0
) -> dict[str, Any]:
    """All runs' steps into a fresh ``gradwatch serve``, ``per_frame`` steps per request
    (``steps`` per run: ``--steps`` unless given)."""
    label = "gradwatch per step" if per_frame == 1 else "gradwatch batched"
    if steps:
        label += f" ({steps} steps per run)"
    steps = steps or args.steps
    db, _ = ingest.database("sqlite", tmp, "")
    server = ingest.Server(db, tmp / "data")
    try:
        runs = [f"peers-{uuid.uuid4().hex[:8]}-{i}" for i in range(args.runs)]
        frames = steps // per_frame
        senders = [
            _gradwatch_sender(
                server.url, r, ingest.encode_run(r, frames, per_frame, args.tensors, i, STATS)
            )
            for i, r in enumerate(runs)
        ]
        values = args.runs * steps * args.tensors
        result = run_phase(label, senders, values, per_frame * args.tensors, server.proc.pid)
        url = f"{server.url}/api/v1/runs/{runs[-1]}/overview"
        with urllib.request.urlopen(url, timeout=120) as reply:
            stored = json.loads(reply.read())["run"]["steps"]
        result["check"] = f"run {runs[-1]}: {stored} of {steps} steps stored"
        if stored != steps:
            raise RuntimeError(result["check"])
        return result
    finally:
        server.stop()


# -- MLflow tracking server ------------------------------------------------------------------


def mlflow_phase(args: argparse.Namespace, per_call: int, tmp: Path) -> dict[str, Any]:
    """All runs' steps into a fresh ``mlflow server``, ``per_call`` steps per log_batch."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    label = "mlflow per step" if per_call == 1 else "mlflow batched"
    server = MlflowServer(tmp)
    try:
        client = MlflowClient(server.url)
        experiment = client.create_experiment(f"peers-{uuid.uuid4().hex[:8]}")
        keys = [f"grad_norm/layer{t}.weight" for t in range(args.tensors)]
        senders, run_ids = [], []
        for i in range(args.runs):
            run_ids.append(client.create_run(experiment).info.run_id)
            norms = np.random.default_rng(i).random((args.steps, args.tensors)).tolist()
            ts = int(time.time() * 1000)
            calls = [
                [
                    Metric(k, v, ts, s)
                    for s in range(a, min(a + per_call, args.steps))
                    for k, v in zip(keys, norms[s], strict=True)
                ]
                for a in range(0, args.steps, per_call)
            ]
            senders.append(_mlflow_sender(server.url, run_ids[-1], calls))
        values = args.runs * args.steps * args.tensors
        result = run_phase(label, senders, values, per_call * args.tensors, server.proc.pid)
        result["server_replies"] = server.replies()  # retried requests show up here
        stored = len(client.get_metric_history(run_ids[-1], keys[-1]))
        result["check"] = f"run {run_ids[-1]}: {stored} of {args.steps} steps of {keys[-1]}"
        if stored != args.steps:
            raise RuntimeError(result["check"])
        return result
    finally:
        server.stop()


def _mlflow_sender(url: str, run_id: str, calls: list[Any]) -> Callable[[list[float]], None]:
    from mlflow import MlflowClient

    client = MlflowClient(url)

    def send(latencies: list[float]) -> None:
        for metrics in calls:
            t0 = time.perf_counter()
            client.log_batch(run_id, metrics=metrics)
            latencies.append(time.perf_counter() - t0)

    return send


# -- report ----------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    """The results as a Markdown table, with gradwatch's throughput over MLflow's."""
    m, cfg = report["machine"], report["config"]
    lines = [
        "# Ingest: gradwatch serve next to MLflow's tracking server",
        "",
        f"{m['date']} · {m['cpu_model']} ({m['logical_cpus']} logical CPUs) · gradwatch"
        f" {m['gradwatch']} (sources {m['gradwatch_sources_sha256']}) · mlflow"
        f" {report['mlflow']} · SQLite · 1-min load average {report['loadavg'][0]:.2f}"
        f" before, {report['loadavg'][1]:.2f} after",
        "",
        f"`{cfg['command']}` — {cfg['runs']} concurrent runs × {cfg['steps']} steps ×"
        f" {cfg['tensors']} gradient norms = {report['results'][0]['values']:,} values per phase"
        " (the last, optional phase: a longer gradwatch run, to show a sustained rate).",
        "",
        "| phase | values | values / request | requests | seconds | values/s | p50 ms | p99 ms "
        "| server CPU s | client CPU s | MLflow replies |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["results"]:
        replies = ", ".join(f"{n} × {k}" for k, n in r.get("server_replies", {}).items())
        lines.append(
            f"| {r['phase']} | {r['values']:,} | {r['values_per_request']:,} | {r['requests']:,}"
            f" | {r['seconds']} | {r['values_per_s']:,} | {r['latency_p50_ms']}"
            f" | {r['latency_p99_ms']} | {r['server_cpu_s']} | {r['client_cpu_s']}"
            f" | {replies or '–'} |"
        )
    rates = {r["phase"]: r["values_per_s"] for r in report["results"]}
    lines += [""]
    for ours, theirs in (
        ("gradwatch per step", "mlflow per step"),
        ("gradwatch batched", "mlflow batched"),
        ("gradwatch per step", "mlflow batched"),
    ):
        if ours in rates and theirs in rates:
            lines.append(f"- {ours} / {theirs}: {rates[ours] / rates[theirs]:.1f}×")
    lines += [
        "",
        "Each phase on a fresh server and database; values/s from the first request to the"
        " last reply. gradwatch's frames also carry each step's loss (not counted). Clients"
        " and server share the machine's cores; server CPU counts the server's process and"
        " its workers, client CPU the benchmark process (MLflow's client encodes JSON in it).",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--steps", type=int, default=18, help="steps per run (default 18)")
    p.add_argument("--steps-per-frame", type=int, default=9, help="gradwatch batched frames")
    p.add_argument(
        "--long-steps",
        type=int,
        default=600,
        help="steps per run of an extra gradwatch batched phase, 50 per frame (0: skip)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (.md beside it)")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.steps_per_frame, args.long_steps = 3, 3, 50
    if args.steps % args.steps_per_frame or args.long_steps % LONG_FRAME:
        p.error(f"--steps must be a multiple of --steps-per-frame, --long-steps of {LONG_FRAME}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the four phases, print progress, write the JSON and the Markdown table."""
    args = parse_args(argv)
    import mlflow

    per_call = MLFLOW_MAX_METRICS // args.tensors
    load0 = os.getloadavg()[0]
    results = []
    phases: list[Callable[[Path], dict[str, Any]]] = [
        lambda tmp: gradwatch_phase(args, 1, tmp),
        lambda tmp: gradwatch_phase(args, args.steps_per_frame, tmp),
        lambda tmp: mlflow_phase(args, 1, tmp),
        lambda tmp: mlflow_phase(args, per_call, tmp),
    ]
    if args.long_steps:
        phases.append(lambda tmp: gradwatch_phase(args, LONG_FRAME, tmp, args.long_steps))
    for phase in phases:
        with tempfile.TemporaryDirectory(prefix="gradwatch-ingest-peers-") as tmp:
            results.append(phase(Path(tmp)))
    report = {
        "machine": core.machine_info(),
        "mlflow": mlflow.__version__,
        "config": {
            "command": " ".join(["python", "benchmarks/ingest_peers.py", *sys.argv[1:]]),
            **{
                k: getattr(args, k)
                for k in ("runs", "tensors", "steps", "steps_per_frame", "long_steps")
            },
            "mlflow_steps_per_call": per_call,
        },
        "loadavg": [load0, os.getloadavg()[0]],
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
