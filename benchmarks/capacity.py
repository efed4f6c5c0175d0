"""Server capacity: how many live runs one ``gradwatch serve`` holds at one request per second.

A real recorded run is replayed as N simulated live runs. The recording (made by the script
unless ``--recording`` names a run folder) is a 150-layer MLP (300 parameter tensors)
watched by gradwatch with ``transfer_every=10``, writing its local spool; its own spool
frames are read back and grouped into requests of one STEPS frame each (10 steps × 300
tensors, plus the small frames written next to it), the first request holding RUN_START
and the fingerprints. Each simulated run has its own run id and its own keep-alive HTTP
connection and posts its next request once per ``--interval`` seconds (phases spread
evenly), like the collector's sender. Requests are open-loop: a run that falls behind
sends its next request as soon as the previous one is answered, and latency is measured
from when the request was due, so a slow server shows up as latency, not as fewer
requests (no coordinated omission).

Per level N: requests due after the ``--warmup`` seconds and before the end of the
``--seconds`` window are counted; *answered* = a 2xx reply within ``--grace`` seconds after
the window. Reported: answered %, p50/p99 latency (answered requests; and p99 by the
second the requests were due, which shows whether a level fails on the start of all its
runs at once or all along), the server processes' CPU seconds per answered request and
their peak RSS (with their child processes), the generator's own CPU
(to show it is not the bottleneck) and the load average. A level passes with ≥ 95 %
answered and p99 ≤ 1 s. Levels double from ``--start`` until one fails, then ``--refine``
bisection steps narrow the largest passing N. Every level gets a fresh server and database.

Usage::

    python benchmarks/capacity.py                                   # SQLite (the default db)
    python benchmarks/capacity.py --db postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/capacity.py --db postgresql://postgres@127.0.0.1:5432/test --servers 2
    python benchmarks/capacity.py --levels 50,100 --seconds 10      # fixed levels, no search
    python benchmarks/capacity.py --levels 100 --profile /tmp/prof  # py-spy on the server

With a PostgreSQL URL the URL is used as an admin connection: each level creates a fresh
database next to it and drops it afterwards. Results go to ``benchmarks/results/capacity``
``.json`` and ``.md`` (``--out``); several configurations append to the same JSON by label.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
PASS_ANSWERED = 0.95
PASS_P99 = 1.0
INGEST = "/api/v1/ingest"
_HEADER = struct.Struct("<2sBBQI")
_RUN_START, _STEPS, _END = 1, 3, 8


# --- the recording ---------------------------------------------------------------------


def record(data_dir: Path, steps: int) -> Path:
    """Train a 150-layer MLP under gradwatch for ``steps`` steps; its run folder."""
    import torch

    import gradwatch

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(150):
        layers += [torch.nn.Linear(32, 32), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    run = gradwatch.watch(model, opt, data_dir=str(data_dir), transfer_every=10, project="capacity")
    for _ in range(steps):
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    run.close()
    return next((data_dir / "runs").iterdir())


def read_recording(run_dir: Path) -> list[tuple[int, int, bytes]]:
    """(kind, seq, raw bytes) of every frame of a run folder's spool, in order."""
    from gradwatch.core.spool import list_segments, segment_path
    from gradwatch.core.wire import scan_frames

    data = b"".join(segment_path(run_dir, i).read_bytes() for i in list_segments(run_dir))
    return [(int(f.record.kind), f.seq, f.raw) for f in scan_frames(data).frames]


def group_requests(frames: list[tuple[int, int, bytes]]) -> list[list[tuple[int, int, bytes]]]:
    """One request per STEPS frame; the frames before the first STEPS go with it (END is
    dropped: the simulated runs stay live)."""
    batches: list[list[tuple[int, int, bytes]]] = [[]]
    seen_steps = False
    for kind, seq, raw in frames:
        if kind == _END:
            continue
        if kind == _STEPS and seen_steps:
            batches.append([])
        seen_steps = seen_steps or kind == _STEPS
        batches[-1].append((kind, seq, raw))
    return [b for b in batches if b]


def reseq(raw: bytes, seq: int) -> bytes:
    """The same frame with another seq (header and CRC rewritten, payload kept)."""
    magic, version, kind, _, length = _HEADER.unpack_from(raw)
    header = _HEADER.pack(magic, version, kind, seq, length)
    payload = raw[_HEADER.size + 4 :]
    return header + struct.pack("<I", zlib.crc32(payload, zlib.crc32(header))) + payload


def start_frame(raw: bytes, run_id: str) -> bytes:
    """The RUN_START frame re-encoded for another run id."""
    from gradwatch.core.wire import Record, encode_frame, scan_frames

    frame = scan_frames(raw).frames[0]
    meta = {**frame.record.meta, "run": run_id, "name": run_id}
    return encode_frame(frame.seq, Record(frame.record.kind, meta, frame.record.arrays))


class Replay:
    """The request bodies of simulated runs: shared bytes, except each run's first request."""

    def __init__(self, frames: list[tuple[int, int, bytes]]) -> None:
        self.batches = group_requests(frames)
        self.top_seq = max(seq for _, seq, _ in frames)
        self._cycles: list[list[bytes]] = []
        self._firsts: dict[str, bytes] = {}

    def build(self, run_ids: list[str], requests: int) -> None:
        """Build every body a level will send before it starts: each run's first request
        (its RUN_START re-encoded for its run id, ~2 ms each) and ``requests`` per run,
        so that the generator's own CPU does not bunch up in the first second, when
        every run sends its first request (the last level's are dropped)."""
        self._firsts = {}
        for run_id in run_ids:
            self._firsts[run_id] = self.first(run_id)
        if requests > 1:
            self.body(requests - 1)

    def body(self, index: int) -> bytes:
        """Request ``index`` after the first (1-based), wrapping with shifted seqs."""
        cycle, i = divmod(index - 1, len(self.batches) - 1)
        while len(self._cycles) <= cycle:
            shift = len(self._cycles) * self.top_seq
            self._cycles.append(
                [
                    b"".join(raw if not shift else reseq(raw, seq + shift) for _, seq, raw in b)
                    for b in self.batches[1:]
                ]
            )
        return self._cycles[cycle][i]

    def first(self, run_id: str) -> bytes:
        """A run's first request (built by ``build`` or now)."""
        built = self._firsts.get(run_id)
        if built is not None:
            return built
        return b"".join(
            start_frame(raw, run_id) if kind == _RUN_START else raw
            for kind, _, raw in self.batches[0]
        )

    def values_per_request(self) -> int:
        """Float statistics per STEPS request (steps × tensors × stats)."""
        from gradwatch.core.wire import scan_frames

        for kind, _, raw in self.batches[1][:1] if len(self.batches) > 1 else []:
            if kind == _STEPS:
                stats = scan_frames(raw).frames[0].record.arrays.get("stats")
                if stats is not None:
                    n = 1
                    for d in stats.shape:
                        n *= d
                    return n
        return 0


# --- servers ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``gradwatch serve`` in a subprocess on a free loopback port."""

    def __init__(self, db: str | None, data_dir: Path, log: Path, python: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [python, "-m", "gradwatch", "serve", "--port", str(self.port)]
        if db:
            cmd += ["--db", db]
        env = {**os.environ, "GRADWATCH_DIR": str(data_dir)}
        self._log = log.open("wb")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(self.url + "/api/v1/health", timeout=2).read()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not start: " + log.read_text()[-2000:])

    def pids(self) -> list[int]:
        """The serve process and its descendants (its prepare helper processes)."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(stat.parent.name))
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    def cpu(self) -> float:
        """User + system CPU seconds so far of the process and its descendants."""
        total = 0.0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def rss_mb(self) -> float:
        """Resident memory of the process and its descendants."""
        total = 0.0
        for pid in self.pids():
            try:
                lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def pg_database(admin: str) -> tuple[str, Any]:
    """A fresh database next to the admin URL's, and a function that drops it."""
    from ingest import database  # the ingest benchmark's, a sibling script

    return database("postgresql", Path(tempfile.gettempdir()), admin)


# --- the load --------------------------------------------------------------------------


@dataclass
class Tally:
    """What the simulated runs saw in the counted window."""

    due: int = 0
    answered: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    by_second: dict[int, list[float]] = field(default_factory=dict)  # by due second

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


async def _request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
) -> int:
    writer.write(head)
    writer.write(body)
    await writer.drain()
    status_line = await reader.readuntil(b"\r\n")
    status = int(status_line.split(b" ", 2)[1])
    length = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        if line == b"\r\n":
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def simulated_run(
    port: int,
    run_id: str,
    replay: Replay,
    t0: float,
    phase: float,
    args: argparse.Namespace,
    tally: Tally,
) -> None:
    """One live run: its first request at ``t0 + phase``, then one per interval."""
    loop = asyncio.get_running_loop()
    count_from, count_to = t0 + args.warmup, t0 + args.warmup + args.seconds
    hard_end = count_to + args.grace
    reader = writer = None
    k = 0
    try:
        while True:
            due = t0 + phase + k * args.interval
            if due >= count_to:
                return
            counted = due >= count_from
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            body = replay.first(run_id) if k == 0 else replay.body(k)
            head = (
                f"POST {INGEST} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Content-Type: application/vnd.gradwatch.frames\r\n"
                f"X-Gradwatch-Run: {run_id}\r\nX-Gradwatch-Schema: 1\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            k += 1
            if counted:
                tally.due += 1
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                assert reader is not None
                left = hard_end - loop.time()
                if left <= 0:
                    return
                status = await asyncio.wait_for(_request(reader, writer, head, body), left)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
                if counted:
                    tally.error(type(e).__name__)
                if writer is not None:
                    writer.close()
                reader = writer = None
                if loop.time() >= hard_end:
                    return
                continue
            if not counted:
                continue
            if 200 <= status < 300:
                tally.answered += 1
                tally.latencies.append(loop.time() - due)
                tally.by_second.setdefault(int(due - t0), []).append(loop.time() - due)
            else:
                tally.error(f"HTTP {status}")
    finally:
        if writer is not None:
            writer.close()


async def drive(
    ports: list[int], replay: Replay, n: int, args: argparse.Namespace, servers: list[Server]
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    tally = Tally()
    prefix = uuid.uuid4().hex[:6]
    run_ids = [f"cap-{prefix}-{i:05d}" for i in range(n)]
    per_run = int((args.warmup + args.seconds + args.grace) / args.interval) + 2
    replay.build(run_ids, per_run)
    t0 = loop.time() + 0.5
    tasks = [
        asyncio.create_task(
            simulated_run(
                ports[i % len(ports)],
                run_ids[i],
                replay,
                t0,
                args.interval * i / n,
                args,
                tally,
            )
        )
        for i in range(n)
    ]
    peak_rss = [0.0] * len(servers)
    cpu0 = cpu1 = [0.0] * len(servers)
    me0 = me1 = 0.0
    start_wall = end_wall = 0.0
    await asyncio.sleep(max(0.0, t0 + args.warmup - loop.time()))
    cpu0, me0, start_wall = [s.cpu() for s in servers], time.process_time(), time.monotonic()
    window_end = t0 + args.warmup + args.seconds
    while loop.time() < window_end:
        await asyncio.sleep(min(0.5, max(0.0, window_end - loop.time())))
        peak_rss = [max(p, s.rss_mb()) for p, s in zip(peak_rss, servers, strict=True)]
    cpu1, me1, end_wall = [s.cpu() for s in servers], time.process_time(), time.monotonic()
    await asyncio.gather(*tasks)
    window = end_wall - start_wall
    lat = sorted(tally.latencies)
    answered_frac = tally.answered / tally.due if tally.due else 0.0
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("inf")
    server_cpu = sum(c1 - c0 for c0, c1 in zip(cpu0, cpu1, strict=True))
    by_second = {
        str(sec): round(1000 * sorted(v)[min(len(v) - 1, int(len(v) * 0.99))], 1)
        for sec, v in sorted(tally.by_second.items())
    }
    return {
        "runs": n,
        "due": tally.due,
        "answered": tally.answered,
        "answered_pct": round(100 * answered_frac, 1),
        "p50_ms": round(1000 * lat[len(lat) // 2], 1) if lat else None,
        "p99_ms": round(1000 * p99, 1) if lat else None,
        "p99_ms_by_due_second": by_second,
        "errors": tally.errors,
        "window_s": round(window, 2),
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_pct": round(100 * server_cpu / window, 1),
        "server_cpu_ms_per_request": round(1000 * server_cpu / tally.answered, 2)
        if tally.answered
        else None,
        "server_rss_mb": [round(r) for r in peak_rss],
        "generator_cpu_pct": round(100 * (me1 - me0) / window, 1),
        "values_per_s": round(tally.answered * replay.values_per_request() / window),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "passed": answered_frac >= PASS_ANSWERED and p99 <= PASS_P99,
    }


def level(n: int, replay: Replay, args: argparse.Namespace) -> dict[str, Any]:
    """One level: fresh database and server(s), N simulated runs, the figures."""
    tmp = Path(tempfile.mkdtemp(prefix="gw-capacity-"))
    drop = None
    servers: list[Server] = []
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        db = None
        if args.db:
            db, drop = pg_database(args.db)
        for i in range(args.servers):
            servers.append(Server(db, tmp / "data", tmp / f"server{i}.log", args.server_python))
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            for i, s in enumerate(servers):
                out = Path(args.profile) / f"{label(args)}-n{n}-server{i}"
                profilers.append(
                    subprocess.Popen(
                        [
                            "sh",
                            "-c",
                            f'sleep {args.warmup + 0.5} && exec "$@"',
                            "sh",
                            args.py_spy,
                            "record",
                            "-p",
                            str(s.proc.pid),
                            "-r",
                            "100",
                            "-t",
                            "--nonblocking",
                            "-d",
                            str(int(args.seconds)),
                            "-f",
                            "raw",
                            "-o",
                            f"{out}.txt",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        load_before = [round(x, 2) for x in os.getloadavg()]
        result = asyncio.run(drive([s.port for s in servers], replay, n, args, servers))
        result["load_avg_before"] = load_before
        for p in profilers:
            p.wait(60)
        return result
    finally:
        for s in servers:
            s.stop()
        if drop is not None:
            drop()
        shutil.rmtree(tmp, ignore_errors=True)


def label(args: argparse.Namespace) -> str:
    if args.label:
        return str(args.label)
    db = "postgresql" if args.db else "sqlite"
    return f"{db}-{args.servers}proc"


def search(replay: Replay, args: argparse.Namespace) -> tuple[list[dict[str, Any]], int]:
    """Every level run, and the largest N that passed (0 if none)."""
    results: list[dict[str, Any]] = []

    def run(n: int) -> bool:
        r = level(n, replay, args)
        results.append(r)
        print(
            f"  N={n:5d}: answered {r['answered_pct']:5.1f}%  p50 {r['p50_ms']} ms  "
            f"p99 {r['p99_ms']} ms  server CPU {r['server_cpu_pct']}% "
            f"({r['server_cpu_ms_per_request']} ms/request)  RSS {r['server_rss_mb']} MB  "
            f"generator CPU {r['generator_cpu_pct']}%  load {r['load_avg']}  "
            f"{'pass' if r['passed'] else 'FAIL'} {r['errors'] or ''}\n"
            f"    p99 ms by the second the request was due: {r['p99_ms_by_due_second']}",
            flush=True,
        )
        return bool(r["passed"])

    if args.levels:
        best = 0
        for n in (int(x) for x in args.levels.split(",")):
            if run(n):
                best = max(best, n)
        return results, best
    good, bad = 0, 0
    n = args.start
    while n <= args.max:
        if run(n):
            good = n
            n *= 2
        else:
            bad = n
            break
    for _ in range(args.refine if bad else 0):
        mid = (good + bad) // 2
        if mid in (good, bad) or bad - good <= max(5, good // 20):
            break
        if run(mid):
            good = mid
        else:
            bad = mid
    return results, good


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Server capacity", "", f"Machine: {report['machine']}", ""]
    for cfg in report["configs"]:
        lines += [
            f"## {cfg['label']}: largest passing N = {cfg['capacity']}",
            "",
            f"`{cfg['command']}` ({cfg['date']}; recording: {cfg['recording']})",
            "",
            "| N runs | answered | p50 ms | p99 ms | server CPU | CPU ms/request | RSS MB "
            "| generator CPU | values/s | load avg (1, 5, 15 min) | |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for r in cfg["levels"]:
            lines.append(
                f"| {r['runs']} | {r['answered_pct']}% | {r['p50_ms']} | {r['p99_ms']} | "
                f"{r['server_cpu_pct']}% | {r['server_cpu_ms_per_request']} | "
                f"{'+'.join(str(x) for x in r['server_rss_mb'])} | {r['generator_cpu_pct']}% | "
                f"{r['values_per_s']:,} | {', '.join(str(x) for x in r['load_avg'])} | "
                f"{'pass' if r['passed'] else 'fail'} |"
            )
        lines.append("")
    lines += [
        f"A level passes with ≥ {PASS_ANSWERED:.0%} of the due requests answered and "
        f"p99 ≤ {PASS_P99:g} s (latency from when the request was due). Server CPU is the "
        "serve process(es)' user + system time over the counted window; on a shared "
        "machine (see the load average) absolute capacity is lower than on a quiet one, "
        "CPU per request is the comparable figure.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default=None, help="PostgreSQL admin URL (default: SQLite)")
    p.add_argument("--servers", type=int, default=1, help="serve processes on one database")
    p.add_argument("--recording", default=None, help="a run folder to replay (default: record)")
    p.add_argument("--record-steps", type=int, default=400)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between a run's requests")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--seconds", type=float, default=12.0, help="the counted window per level")
    p.add_argument("--grace", type=float, default=2.0)
    p.add_argument("--start", type=int, default=50)
    p.add_argument("--max", type=int, default=4000)
    p.add_argument("--refine", type=int, default=2)
    p.add_argument("--levels", default=None, help="comma-separated N to run (no search)")
    p.add_argument(
        "--profile", default=None, help="folder for py-spy profiles of the counted window"
    )
    p.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    p.add_argument(
        "--server-python",
        default=sys.executable,
        help="the interpreter that runs gradwatch serve (e.g. another checkout's venv, for "
        "a before/after comparison under the same load)",
    )
    p.add_argument("--label", default=None, help="the configuration's name in the results")
    p.add_argument("--out", default=str(ROOT / "results" / "capacity.json"))
    p.add_argument("--record-only", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.record_only:
        print(record(Path(args.record_only), args.record_steps))
        return
    if args.servers > 1 and not args.db:
        p.error("--servers > 1 needs --db postgresql://... (SQLite is one process's file)")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory(prefix="gw-recording-") as rec_tmp:
        if args.recording:
            run_dir = Path(args.recording)
        else:
            print(f"recording a 150-layer MLP for {args.record_steps} steps ...", flush=True)
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--record-only",
                    rec_tmp,
                    "--record-steps",
                    str(args.record_steps),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            run_dir = Path(out.stdout.strip().splitlines()[-1])
        replay = Replay(read_recording(run_dir))
    sizes = [sum(len(raw) for _, _, raw in b) for b in replay.batches[1:]]
    print(
        f"{label(args)}: {len(replay.batches)} requests per recorded run, "
        f"{sum(sizes) // len(sizes):,} B each; {replay.values_per_request():,} values/request",
        flush=True,
    )
    results, best = search(replay, args)
    cfg = {
        "label": label(args),
        "command": "python benchmarks/capacity.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "recording": args.recording
        or f"150-layer MLP, 300 tensors, {args.record_steps} steps, transfer_every=10",
        "request_bytes": sum(sizes) // len(sizes),
        "values_per_request": replay.values_per_request(),
        "interval_s": args.interval,
        "capacity": best,
        "levels": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine(), "configs": []}
    if out.exists():
        with contextlib.suppress(ValueError):
            report = json.loads(out.read_text())
    report["machine"] = machine()
    report["configs"] = [c for c in report["configs"] if c["label"] != cfg["label"]] + [cfg]
    out.write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(f"{label(args)}: largest N with ≥95% answered and p99 ≤ 1 s: {best}")


if __name__ == "__main__":
    main()
