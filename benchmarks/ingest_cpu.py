"""Server CPU per ingest request, closed loop: comparable under load, quick to run.

Replays the same recording as ``capacity.py`` (one request = one STEPS frame of 10 steps ×
300 tensors): ``--runs`` runs post their first request (RUN_START, fingerprints), then
``--rounds`` more each, over ``--conns`` keep-alive connections as fast as the server
answers, to one ``gradwatch serve`` (SQLite unless ``--db``). Reported: the server
process's CPU seconds (user + system) per request over the timed rounds, requests/s,
the same for the runs' first requests (which carry RUN_START and the fingerprints) and
the load average. Unlike ``capacity.py`` it has no pass/fail, so a before/after
comparison on a busy machine takes seconds. ``--per-thread`` also splits the server's CPU
per request by thread (``/proc/PID/task``; names from ``py-spy dump``): the event loop
(``MainThread``), ``gradwatch-prepare``, ``gradwatch-ingest`` (the writer), the monitor and
the checkpointer.

Usage::

    python benchmarks/ingest_cpu.py RUN_DIR --runs 100 --rounds 5
    python benchmarks/ingest_cpu.py RUN_DIR --runs 200 --rounds 5 --per-thread
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from capacity import INGEST, Replay, Server, _request, pg_database, read_recording


def _head(run: str, body: bytes) -> bytes:
    return (
        f"POST {INGEST} HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.gradwatch.frames"
        f"\r\nX-Gradwatch-Run: {run}\r\nX-Gradwatch-Schema: 1\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()


class Threads:
    """CPU seconds of the server's threads by name (``py-spy dump`` names them)."""

    def __init__(self, server: Server) -> None:
        self.pid = server.proc.pid
        self.names: dict[int, str] = {}

    def cpu(self) -> dict[str, float]:
        tasks = Path(f"/proc/{self.pid}/task")
        tids = [int(t.name) for t in tasks.iterdir()]
        if any(t not in self.names for t in tids):
            dump = subprocess.run(
                ["py-spy", "dump", "-p", str(self.pid)], capture_output=True, text=True
            ).stdout
            for tid, name in re.findall(r'^Thread (\d+) \(.*?\): "([^"]+)"', dump, re.M):
                self.names[int(tid)] = name
        out: dict[str, float] = {}
        for tid in tids:
            try:
                fields = (tasks / str(tid) / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            name = self.names.get(tid, f"thread {tid}")
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
        return out


TICK = os.sysconf("SC_CLK_TCK")


def _split(before: dict[str, float], after: dict[str, float], n: int) -> str:
    parts = [
        f"{name} {1000 * (after[name] - before.get(name, 0.0)) / n:.2f}"
        for name in sorted(after)
        if after[name] - before.get(name, 0.0) > 0
    ]
    return "; ms/request by thread: " + ", ".join(parts)


async def _drive(server: Server, replay: Replay, args: argparse.Namespace) -> str:
    ids = [f"run{i:05d}" for i in range(args.runs)]
    todo: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

    async def worker() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        sent = 0
        while not todo.empty():
            run, k = todo.get_nowait()
            body = replay.first(run) if k == 0 else replay.body(k)
            status = await _request(reader, writer, _head(run, body), body)
            if status != 200:
                raise RuntimeError(f"HTTP {status}")
            sent += 1
        writer.close()
        return sent

    threads = Threads(server) if args.per_thread else None
    for run in ids:
        todo.put_nowait((run, 0))
    t0 = threads.cpu() if threads else {}
    first0, first_wall0 = server.cpu(), time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(args.conns)])
    first_wall = time.perf_counter() - first_wall0
    await asyncio.sleep(3)  # the monitor's first look at the new runs (counted with them)
    first = server.cpu() - first0
    t1 = threads.cpu() if threads else {}
    for k in range(1, args.rounds + 1):
        for run in ids:
            todo.put_nowait((run, k))
    cpu0, wall0 = server.cpu(), time.perf_counter()
    n = sum(await asyncio.gather(*[worker() for _ in range(args.conns)]))
    cpu, wall = server.cpu() - cpu0, time.perf_counter() - wall0
    t2 = threads.cpu() if threads else {}
    split = (_split(t1, t2, n) + "; first requests" + _split(t0, t1, args.runs)) if threads else ""
    return (
        f"{n} requests: server {1000 * cpu / n:.2f} ms CPU/request, {n / wall:.0f} requests/s, "
        f"server CPU {100 * cpu / wall:.0f}%; first requests (RUN_START, fingerprints): "
        f"{1000 * first / args.runs:.2f} ms CPU/request, {args.runs / first_wall:.0f} "
        f"requests/s; load average {os.getloadavg()[0]:.2f}{split}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recording", help="a run folder (capacity.py --record-only DIR)")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--conns", type=int, default=16)
    p.add_argument("--db", default=None, help="PostgreSQL admin URL (default: SQLite)")
    p.add_argument("--server-python", default=sys.executable)
    p.add_argument("--per-thread", action="store_true", help="CPU per thread (needs py-spy)")
    args = p.parse_args()
    replay = Replay(read_recording(Path(args.recording)))
    tmp = Path(tempfile.mkdtemp(prefix="gw-ingest-cpu-"))
    db: str | None = None
    drop: Any = None
    if args.db:
        db, drop = pg_database(args.db)
    server = Server(db, tmp / "data", tmp / "server.log", args.server_python)
    try:
        print(asyncio.run(_drive(server, replay, args)))
    finally:
        server.stop()
        if drop is not None:
            drop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
