"""RunIO: the background writer never blocks or raises, and its memory stays bounded."""

from __future__ import annotations

import os
import socket
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from gradwatch.core.spool import read_spool
from gradwatch.core.wire import Array, Kind, Record
from gradwatch.transport.writer import RunIO


def record(i: int, width: int = 8) -> Record:
    return Record(Kind.STEPS, {"step": i}, {"g": Array.from_values("f8", [float(i)] * width)})


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_records_and_callables_are_written_in_order(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run")
    threads: list[str] = []

    def deferred() -> Record:
        threads.append(threading.current_thread().name)
        return record(1)

    io.submit(record(0))
    io.submit(deferred)
    io.submit(lambda: None)  # nothing to write
    io.submit(record(2))
    assert io.flush(timeout=5)
    assert threads == ["gradwatch-writer"]
    assert [f.record.meta["step"] for f in read_spool(tmp_path / "run").frames] == [0, 1, 2]
    stats = io.stats
    assert (stats.submitted, stats.written, stats.internal_errors) == (4, 3, 0)
    io.close()


def test_flush_waits_for_a_slow_callable(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run", flush_interval=10.0)  # flush must not wait for the tick
    gate = threading.Event()

    def slow() -> Record:
        gate.wait(0.3)
        return record(1)

    io.submit(slow)
    start = time.monotonic()
    assert io.flush(timeout=5)
    assert 0.25 < time.monotonic() - start < 3
    assert len(read_spool(tmp_path / "run").frames) == 1
    blocked = threading.Event()
    io.submit(lambda: (blocked.wait(2), record(2))[1])
    assert io.flush(timeout=0.1) is False  # times out, returns False, does not raise
    blocked.set()
    io.close()


def test_submit_is_cheap_and_never_blocks(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run")
    rec = record(0)
    start = time.perf_counter()
    for _ in range(20_000):
        io.submit(rec)
    per_call = (time.perf_counter() - start) / 20_000
    assert per_call < 20e-6, f"submit took {per_call * 1e6:.1f} us"
    io.close()


def test_queue_overflow_drops_and_counts(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run", max_pending=10)
    release = threading.Event()
    io.submit(lambda: (release.wait(5), record(0))[1])  # hold the writer busy
    time.sleep(0.4)  # the writer has taken the first item and is blocked in it
    for i in range(1, 51):
        io.submit(record(i))
    release.set()
    io.close()
    stats = io.stats
    assert stats.submitted == 51
    assert stats.dropped_queue == 40
    assert stats.written == 11
    assert len(read_spool(tmp_path / "run").frames) == 11


def test_errors_in_callables_are_counted_and_reported_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    io = RunIO(tmp_path / "run")

    def broken() -> Record:
        raise RuntimeError("boom")

    for _ in range(3):
        io.submit(broken)
    io.submit(lambda: Record(Kind.EVENTS, {"bad": object()}))  # encoder error
    io.submit(record(1))
    assert io.flush()
    io.close()
    stats = io.stats
    assert stats.internal_errors == 4
    assert stats.written == 1
    err = capfd.readouterr().err
    assert err.count("gradwatch:") == 1
    assert "RuntimeError: boom" in err


def test_close_is_idempotent_and_submit_after_close_is_ignored(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run")
    io.submit(record(0))
    io.close()
    io.close()
    io.submit(record(1))
    assert io.flush() is True
    assert len(read_spool(tmp_path / "run").frames) == 1


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_forked_child_does_not_touch_the_parent_spool(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run")
    io.submit(record(0))
    assert io.flush()
    pid = os.fork()
    if pid == 0:  # child: everything is a no-op and must not hang or raise
        try:
            io.submit(record(99))
            ok = io.flush(timeout=1) is True
            io.close(timeout=1)
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    io.submit(record(1))
    io.close()
    assert [f.record.meta["step"] for f in read_spool(tmp_path / "run").frames] == [0, 1]


def test_close_is_bounded_when_the_server_is_down(tmp_path: Path) -> None:
    io = RunIO(tmp_path / "run", server=f"http://127.0.0.1:{closed_port()}")
    io.submit(record(0))
    start = time.monotonic()
    io.close(timeout=2.0)
    assert time.monotonic() - start < 2.5
    assert io.stats.sent_frames == 0
    assert io.stats.written == 1
    assert io.stats.last_error is not None


MEMORY_BOUND = 16 << 20


def test_memory_stays_bounded_while_the_server_is_down(tmp_path: Path) -> None:
    """~40 MiB of records go through RunIO while its server is unreachable.

    Bound: the peak of Python allocations traced by tracemalloc (all threads) over the
    whole run stays under 16 MiB, i.e. well below the data volume. Frames go to the spool
    and the sender re-reads at most one 1 MiB batch from disk per attempt.
    """
    io = RunIO(tmp_path / "run", server=f"http://127.0.0.1:{closed_port()}", max_pending=1000)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for i in range(10_000):
            io.submit(record(i, width=500))  # ~4 KiB per frame
            if i % 500 == 499:
                io.flush()
        assert io.flush(timeout=30)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    io.close(timeout=0.5)
    stats = io.stats
    spooled = sum(p.stat().st_size for p in (tmp_path / "run").glob("spool-*.gws"))
    assert stats.written == 10_000
    assert stats.dropped_queue == 0
    assert stats.sent_frames == 0
    assert spooled > 40e6
    assert peak - base < MEMORY_BOUND, f"peak growth {(peak - base) / 2**20:.1f} MiB"
