"""The HTTP sender against a real loopback ingest server with scripted faults."""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gradwatch.core.paths import runs_dir
from gradwatch.core.spool import SpoolWriter, read_acked, read_spool, segment_path
from gradwatch.core.wire import FRAME_CONTENT_TYPE, Array, Kind, Record, scan_frames
from gradwatch.transport.sender import (
    MAX_BATCH_BYTES,
    HTTPTransport,
    SyncResult,
    parse_retry_after,
    send_run,
    sync_all,
)
from gradwatch.transport.writer import RunIO


@dataclass
class Ingest:
    """State of the fake server: what arrived, and the faults still to play."""

    seen: dict[tuple[str, int], Record] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)  # "503", "reset", "400", "429", "ok"
    retry_after: str = "1"
    requests: list[tuple[float, str, int]] = field(default_factory=list)  # (time, outcome, frames)
    duplicates: int = 0
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    delay: float = 0.0  # seconds before every reply: a slow server
    sizes: list[int] = field(default_factory=list)  # body bytes of every request


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ingest: Ingest

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        state = self.server.ingest  # type: ignore[attr-defined]
        time.sleep(state.delay)
        state.sizes.append(len(body))
        with state.lock:
            state.headers.append(dict(self.headers))
            fault = state.faults.pop(0) if state.faults else None
            fault = None if fault == "ok" else fault
            scan = scan_frames(body)
            state.requests.append((time.monotonic(), fault or "ok", len(scan.frames)))
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if fault in ("503", "429", "400"):
            self._reply(int(fault), {"detail": f"scripted {fault}"}, retry_after=state.retry_after)
            return
        if self.path != "/api/v1/ingest" or self.headers["Content-Type"] != FRAME_CONTENT_TYPE:
            self._reply(404, {"detail": "wrong path or content type"})
            return
        run = self.headers["X-Gradwatch-Run"]
        accepted = duplicates = 0
        with state.lock:
            for frame in scan.frames:
                if (run, frame.seq) in state.seen:
                    duplicates += 1
                else:
                    state.seen[(run, frame.seq)] = frame.record
                    accepted += 1
            state.duplicates += duplicates
        self._reply(200, {"run": run, "accepted": accepted, "duplicates": duplicates})

    def _reply(self, status: int, payload: dict[str, object], retry_after: str = "") -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after and status in (429, 503):
            self.send_header("Retry-After", retry_after)
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[tuple[str, Ingest]]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.ingest = Ingest()  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", httpd.ingest  # type: ignore[attr-defined]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def spool_run(run_dir: Path, n: int, start: int = 0) -> None:
    writer = SpoolWriter(run_dir, segment_bytes=20_000)
    for i in range(start, start + n):
        meta = {"step": i, "loss": float("nan") if i % 7 == 0 else i / 3, "name": "x'; DROP --"}
        writer.append(Record(Kind.STEPS, meta, {"g": Array.from_values("f4", [i, float("inf")])}))
    writer.close()


def received(ingest: Ingest, run: str) -> list[int]:
    return sorted(seq for (r, seq) in ingest.seen if r == run)


def send_through_faults(
    tmp_path: Path,
    server: tuple[str, Ingest],
    name: str,
    frames: int,
    faults: list[str],
    retry_after: str,
    seconds: float,
) -> tuple[SyncResult, Path]:
    """Spool ``frames`` frames of run ``name``, have the server answer its first requests
    with ``faults`` (``Retry-After: retry_after``), and send the run within ``seconds``."""
    url, ingest = server
    run = runs_dir(tmp_path) / name
    spool_run(run, frames)
    ingest.faults = faults
    ingest.retry_after = retry_after
    transport = HTTPTransport(url)
    try:
        return send_run(run, transport, deadline=time.monotonic() + seconds), run
    finally:
        transport.close()


def test_everything_arrives_exactly_once_after_failures(
    tmp_path: Path, server: tuple[str, Ingest]
) -> None:
    ingest = server[1]
    faults = ["reset", "ok", "503", "ok", "reset", "429"]
    result, run = send_through_faults(tmp_path, server, "run-a", 5000, faults, "0", 30)
    assert result.error is None
    assert result.complete
    assert received(ingest, "run-a") == list(range(1, 5001))
    assert ingest.duplicates == 0
    assert result.sent == result.accepted == 5000
    assert read_acked(run) == 5000
    assert all(n <= 2000 for _, _, n in ingest.requests)
    assert ingest.headers[-1]["X-Gradwatch-Schema"] == "1"


def test_retry_after_is_honoured(tmp_path: Path, server: tuple[str, Ingest]) -> None:
    url, ingest = server
    run = runs_dir(tmp_path) / "run-b"
    spool_run(run, 10)
    ingest.faults = ["503"]
    ingest.retry_after = "1"
    transport = HTTPTransport(url)
    send_run(run, transport, deadline=time.monotonic() + 10)
    transport.close()
    (t_fail, what, _), (t_ok, ok, _) = ingest.requests[:2]
    assert (what, ok) == ("503", "ok")
    assert 1.0 <= t_ok - t_fail < 2.0, f"waited {t_ok - t_fail:.2f} s"
    assert received(ingest, "run-b") == list(range(1, 11))


def test_replaying_a_batch_is_harmless(tmp_path: Path, server: tuple[str, Ingest]) -> None:
    url, ingest = server
    run = runs_dir(tmp_path) / "run-c"
    spool_run(run, 100)
    transport = HTTPTransport(url)
    first = send_run(run, transport)
    (run / "acked").unlink()  # as if the ack was lost: everything is sent again
    again = send_run(run, transport)
    transport.close()
    assert (first.accepted, first.duplicates) == (100, 0)
    assert (again.accepted, again.duplicates) == (0, 100)
    assert received(ingest, "run-c") == list(range(1, 101))


def test_permanent_rejection_stops_the_run(tmp_path: Path, server: tuple[str, Ingest]) -> None:
    url, ingest = server
    run = runs_dir(tmp_path) / "run-d"
    spool_run(run, 10)
    ingest.faults = ["400"]
    transport = HTTPTransport(url)
    result = send_run(run, transport, deadline=time.monotonic() + 10)
    transport.close()
    assert result.rejected
    assert not result.complete
    assert result.error is not None
    assert "HTTP 400" in result.error
    assert "scripted 400" in result.error
    assert len(ingest.requests) == 1  # no spinning
    assert read_acked(run) == 0


def test_sync_all_sends_after_the_ack_and_reports_progress(
    tmp_path: Path, server: tuple[str, Ingest], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ingest = server
    monkeypatch.setenv("GRADWATCH_TOKEN", "s3cret")
    spool_run(runs_dir(tmp_path) / "run-e", 30)
    spool_run(runs_dir(tmp_path) / "run-f", 5)
    (runs_dir(tmp_path) / "not-a-run").mkdir()
    (runs_dir(tmp_path) / "run-e" / "acked").write_text("20")
    seen: list[SyncResult] = []
    results = sync_all(tmp_path, url, progress=seen.append)
    assert [(r.run, r.already_acked, r.sent, r.complete) for r in results] == [
        ("run-e", 20, 10, True),
        ("run-f", 0, 5, True),
    ]
    assert received(ingest, "run-e") == list(range(21, 31))
    assert {h["Authorization"] for h in ingest.headers} == {"Bearer s3cret"}
    assert seen
    assert seen[-1].run == "run-f"
    assert sync_all(tmp_path, url)[0].sent == 0  # nothing left


def test_sync_of_a_killed_run_with_a_torn_tail(tmp_path: Path, server: tuple[str, Ingest]) -> None:
    url, ingest = server
    run = runs_dir(tmp_path) / "run-g"
    spool_run(run, 50)
    frames = read_spool(run).frames
    last = frames[-1]
    path = segment_path(run, max(int(p.stem.split("-")[1]) for p in run.glob("spool-*.gws")))
    with open(path, "r+b") as f:
        f.truncate(last.offset + last.size - 5)
    [result] = sync_all(tmp_path, url)
    assert received(ingest, "run-g") == list(range(1, 50))
    assert result.torn_tail_bytes == last.size - 5
    assert result.complete
    assert result.error is None


def test_sync_gives_up_when_the_server_is_down(tmp_path: Path) -> None:
    spool_run(runs_dir(tmp_path) / "run-h", 3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    [result] = sync_all(tmp_path, f"http://127.0.0.1:{port}", max_attempts=2)
    assert time.monotonic() - start < 5
    assert not result.complete
    assert result.sent == 0
    assert result.error is not None
    assert "cannot reach the server" in result.error


def test_run_io_streams_to_the_server_during_an_outage(
    tmp_path: Path, server: tuple[str, Ingest]
) -> None:
    url, ingest = server
    ingest.faults = ["503", "reset"]
    ingest.retry_after = "0"
    io = RunIO(tmp_path / "run-i", server=url, token="t0k", flush_interval=0.05)
    for i in range(300):
        io.submit(Record(Kind.STEPS, {"step": i}))
        if i % 100 == 0:
            time.sleep(0.1)
    io.close(timeout=10)
    stats = io.stats
    assert received(ingest, "run-i") == list(range(1, 301))
    assert stats.sent_frames >= 300
    assert stats.acked_seq == 300
    assert ingest.duplicates == 0


def test_a_slow_server_gets_fewer_larger_requests_and_training_never_waits(
    tmp_path: Path, server: tuple[str, Ingest]
) -> None:
    url, ingest = server
    ingest.delay = 0.25  # every reply takes a quarter of a second
    io = RunIO(tmp_path / "run-s", server=url, flush_interval=0.02)
    slowest = 0.0
    for i in range(400):  # 400 records over ~2 s: ~8 per reply
        t0 = time.perf_counter()
        io.submit(Record(Kind.STEPS, {"step": i}, {"g": Array.from_values("f4", [i, 1.0])}))
        slowest = max(slowest, time.perf_counter() - t0)
        time.sleep(0.005)
    io.close(timeout=20)
    assert received(ingest, "run-s") == list(range(1, 401))
    frames = [n for _, what, n in ingest.requests if what == "ok"]
    # one request in flight per run: what arrived meanwhile goes in the next one
    assert len(frames) < 400 / 4, f"{len(frames)} requests for 400 frames"
    assert max(frames) >= 8
    assert max(ingest.sizes) <= MAX_BATCH_BYTES
    assert slowest < 0.1, f"submit took {slowest * 1000:.0f} ms"


def test_a_run_backs_off_on_503_and_429_as_long_as_the_server_says(
    tmp_path: Path, server: tuple[str, Ingest]
) -> None:
    ingest = server[1]
    result, _ = send_through_faults(tmp_path, server, "run-r", 20, ["503", "429"], "0.4", 10)
    times = [t for t, _, _ in ingest.requests]
    assert [what for _, what, _ in ingest.requests] == ["503", "429", "ok"]
    assert all(0.4 <= b - a < 1.0 for a, b in itertools.pairwise(times))
    assert result.complete and received(ingest, "run-r") == list(range(1, 21))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3", 3.0), ("0", 0.0), ("-4", 0.0), ("1e9", 300.0), ("soon", None), (None, None)],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_parse_retry_after_http_date() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
