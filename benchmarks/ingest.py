"""Server ingest throughput and run-overview latency, over real HTTP on loopback.

Ingest: ``--runs`` (8) simulated runs send concurrently, one thread each, through the
collector's own ``HTTPTransport``, to a ``gradwatch serve`` subprocess: every request is
one STEPS frame of ``--steps-per-frame`` steps × ``--tensors`` (300) tensors × 5 stats
(float32). Reported: values/s sustained over the whole phase (wall clock from the first
request to the last reply) and the p50/p99 request latency. Frames are encoded before
the clock starts, so the clients measure the server, not the encoder.

Overview: one run of ``--overview-steps`` (100k) steps × 300 tensors is ingested, then
``GET /api/v1/runs/{id}/overview`` is requested ``--overview-reps`` times: the run, its
loss downsampled to 200 points (min/max per bucket, every non-finite point) and the
300 tensors × 200 columns grad-norm heatmap (what the run page shows first). Reported:
median and p95 latency, measured by the client (request, server, JSON parse).

Usage::

    python benchmarks/ingest.py                      # SQLite and PostgreSQL, full size
    python benchmarks/ingest.py --quick --out /tmp/ingest.json
    python benchmarks/ingest.py --db sqlite --frames 10

PostgreSQL: ``--pg postgresql://postgres@127.0.0.1:5432/postgres`` (admin URL); a fresh
database is created and dropped for each run.
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
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import save_results

from gradwatch.core.wire import (
    FRAME_CONTENT_TYPE,
    SCHEMA_VERSION,
    Array,
    Kind,
    Record,
    encode_frame,
)
from gradwatch.transport.sender import INGEST_PATH, HTTPTransport

STATS = ["grad_norm", "param_norm", "update_norm", "nonfinite_grad", "grad_max"]
ROOT = Path(__file__).resolve().parent


def start_record(run: str, tensors: int, stats: Sequence[str] = STATS) -> Record:
    return Record(
        Kind.RUN_START,
        {
            "run": run,
            "project": "bench",
            "started_at": time.time(),
            "host": "bench",
            "stats": list(stats),
            "tensors": [{"name": f"layer{i}.weight", "optimizer": 0} for i in range(tensors)],
        },
    )


def steps_record(
    first: int, n: int, tensors: int, rng: np.random.Generator, names: Sequence[str] = STATS
) -> Record:
    stats = rng.random((n, tensors, len(names)), dtype=np.float32)
    loss = rng.random(n, dtype=np.float32)
    return Record(
        Kind.STEPS,
        {"optimizer": 0, "stats": list(names)},
        {
            "step": Array.from_buffer(
                "i8", (n,), np.arange(first, first + n, dtype="<i8").tobytes()
            ),
            "loss": Array.from_buffer("f4", (n,), loss.tobytes()),
            "has_loss": Array.from_buffer("u1", (n,), np.ones(n, dtype="u1").tobytes()),
            "stats": Array.from_buffer("f4", stats.shape, stats.tobytes()),
        },
    )


def encode_run(
    run: str, frames: int, n: int, tensors: int, seed: int, stats: Sequence[str] = STATS
) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = [encode_frame(1, start_record(run, tensors, stats))]
    out += [
        encode_frame(2 + i, steps_record(1 + i * n, n, tensors, rng, stats)) for i in range(frames)
    ]
    return out


def headers(run: str) -> dict[str, str]:
    return {
        "Content-Type": FRAME_CONTENT_TYPE,
        "X-Gradwatch-Run": run,
        "X-Gradwatch-Schema": str(SCHEMA_VERSION),
    }


class Server:
    """``gradwatch serve`` in a subprocess on a free loopback port."""

    def __init__(self, db: str, data_dir: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "gradwatch", "serve", "--port", str(self.port), "--db", db]
        env = {**os.environ, "GRADWATCH_DIR": str(data_dir)}
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/api/v1/health", timeout=1).read()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server did not start: " + self.proc.stderr.read().decode()[-2000:])  # type: ignore[union-attr]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def send_all(
    url: str, run: str, bodies: list[bytes], latencies: list[float], barrier: threading.Barrier
) -> None:
    transport = HTTPTransport(url)
    transport.post(INGEST_PATH, bodies[0], headers(run), 60)
    barrier.wait()
    for body in bodies[1:]:
        t0 = time.perf_counter()
        reply = transport.post(INGEST_PATH, body, headers(run), 120)
        latencies.append(time.perf_counter() - t0)
        if reply.status != 200:
            raise RuntimeError(f"HTTP {reply.status}: {reply.body[:200]!r}")
    transport.close()


def ingest_phase(url: str, args: argparse.Namespace) -> dict[str, Any]:
    runs = [f"bench-{uuid.uuid4().hex[:8]}-{i}" for i in range(args.runs)]
    bodies = [
        encode_run(r, args.frames, args.steps_per_frame, args.tensors, i)
        for i, r in enumerate(runs)
    ]
    latencies: list[float] = []
    barrier = threading.Barrier(args.runs + 1)
    threads = [
        threading.Thread(target=send_all, args=(url, r, b, latencies, barrier))
        for r, b in zip(runs, bodies, strict=True)
    ]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    values = args.runs * args.frames * args.steps_per_frame * args.tensors * len(STATS)
    lat = sorted(latencies)
    return {
        "values": values,
        "requests": len(lat),
        "request_bytes": len(bodies[0][1]),
        "seconds": round(wall, 3),
        "values_per_s": round(values / wall),
        "latency_p50_ms": round(1000 * lat[len(lat) // 2], 1),
        "latency_p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1),
    }


def overview_phase(url: str, args: argparse.Namespace) -> dict[str, Any]:
    run = f"overview-{uuid.uuid4().hex[:8]}"
    per_frame = 500
    frames = args.overview_steps // per_frame
    rng = np.random.default_rng(7)
    transport = HTTPTransport(url)
    transport.post(INGEST_PATH, encode_frame(1, start_record(run, args.tensors)), headers(run), 60)
    t0 = time.perf_counter()
    for i in range(frames):
        body = encode_frame(2 + i, steps_record(1 + i * per_frame, per_frame, args.tensors, rng))
        transport.post(INGEST_PATH, body, headers(run), 300)
    load_s = time.perf_counter() - t0
    transport.close()
    times = []
    for _ in range(args.overview_reps):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{url}/api/v1/runs/{run}/overview", timeout=60) as reply:
            overview = json.loads(reply.read())
        times.append(time.perf_counter() - t0)
    assert overview["run"]["steps"] == frames * per_frame
    assert (
        len(overview["tensors"]) == args.tensors and overview["loss"]["total"] == frames * per_frame
    )
    times.sort()
    return {
        "steps": frames * per_frame,
        "tensors": args.tensors,
        "load_seconds": round(load_s, 1),
        "overview_median_ms": round(1000 * statistics.median(times), 1),
        "overview_p95_ms": round(1000 * times[min(len(times) - 1, int(len(times) * 0.95))], 1),
        "reps": len(times),
    }


def database(kind: str, tmp: Path, pg_admin: str) -> tuple[str, Any]:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'bench.db'}", lambda: None
    import psycopg

    name = f"gradwatch_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(pg_admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')

    parts = urllib.parse.urlsplit(pg_admin)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name)), drop


def db_bytes(url: str) -> int:
    """The database's size on disk: file + WAL for SQLite (after a checkpoint), the
    database size for PostgreSQL; tables and indexes, everything the server stored."""
    if url.startswith("sqlite:///"):
        import sqlite3

        path = Path(url[len("sqlite:///") :])
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = path.with_name(path.name + "-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def bench(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        url, drop = database(kind, Path(tmp), args.pg)
        server = Server(url, Path(tmp) / "data")
        try:
            result = {"db": kind, "ingest": ingest_phase(server.url, args)}
            stored = db_bytes(url)
            result["ingest"]["db_bytes"] = stored
            result["ingest"]["bytes_per_value"] = round(stored / result["ingest"]["values"], 2)
            if args.overview_steps:
                result["overview"] = overview_phase(server.url, args)
            return result
        finally:
            server.stop()
            drop()


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Server ingest benchmark",
        "",
        f"`{report['command']}` on {report['machine']}",
        "",
        "| db | values/s | p50 ms | p99 ms | request | bytes/value | overview median ms "
        "| overview p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        i, o = r["ingest"], r.get("overview", {})
        lines.append(
            f"| {r['db']} | {i['values_per_s']:,} | {i['latency_p50_ms']} | "
            f"{i['latency_p99_ms']} | {i['request_bytes'] / 1e6:.2f} MB | "
            f"{i.get('bytes_per_value', '-')} | "
            f"{o.get('overview_median_ms', '-')} | {o.get('overview_p95_ms', '-')} |"
        )
    lines += [
        "",
        "Goals (issue 4): ≥ 5,000,000 values/s into SQLite; overview ≤ 300 ms. bytes/value: "
        "the database on disk (tables, indexes, WAL; PostgreSQL: pg_database_size, which "
        "includes its empty catalog of a few MB) after the ingest phase, divided by the "
        "float32 statistics values stored.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--frames", type=int, default=100, help="STEPS requests per run")
    p.add_argument("--steps-per-frame", type=int, default=50)
    p.add_argument("--overview-steps", type=int, default=100_000)
    p.add_argument("--overview-reps", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument("--out", default=str(ROOT / "results" / "ingest.json"))
    args = p.parse_args()
    if args.quick:
        args.frames, args.overview_steps, args.overview_reps = 4, 5000, 3
    kinds = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    report = {
        "command": "python benchmarks/ingest.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "results": [bench(k, args) for k in kinds],
    }
    out = Path(args.out)
    save_results.save(out, report, markdown(report))


if __name__ == "__main__":
    main()
