"""The background writer (and optional sender) of one run; the training thread never waits.

``RunIO.submit`` appends to a bounded in-memory deque and returns: no lock, no I/O, no
exception. A daemon thread ``gradwatch-writer`` drains the deque at least every
``flush_interval`` seconds into the crash-safe spool (gradwatch.core.spool), so a SIGKILLed
process loses at most about one interval. A source may be a callable: it is evaluated on
the writer thread, which lets the training side defer device-to-host waits.

With a server configured, a daemon thread ``gradwatch-sender`` ships unacknowledged frames
read back from the spool files (gradwatch.transport.sender), so memory stays flat however long the
server is away. Internal failures are counted in ``stats`` and reported once to stderr.

After ``os.fork`` (DataLoader workers) every RunIO in the child is disowned: ``submit``,
``flush`` and ``close`` do nothing there, and the parent's threads and files are untouched.

Example::

    io = RunIO(run_dir, server="http://127.0.0.1:8765")
    io.submit(Record(Kind.HEARTBEAT, {}))
    io.submit(lambda: build_record_after_transfer())   # runs on the writer thread
    io.close(timeout=5.0)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from gradwatch.core.errors import ConfigError
from gradwatch.core.spool import SpoolWriter, read_acked
from gradwatch.core.wire import Record

if TYPE_CHECKING:
    from gradwatch.transport.sender import Outcome, RunSender, Transport

RecordSource: TypeAlias = Record | Callable[[], Record | None]
SEND_INTERVAL = 0.5
REQUEST_TIMEOUT = 10.0
FINAL_ATTEMPTS = 3  # failed requests tolerated by close() before leaving the rest to sync
FINAL_RETRY_DELAY = 1.0  # close() waits at most this between its attempts (unless Retry-After)


@dataclass
class IOStats:
    """Counters of one RunIO (a snapshot)."""

    submitted: int = 0
    written: int = 0
    dropped_queue: int = 0
    dropped_disk: int = 0
    internal_errors: int = 0
    sent_frames: int = 0
    acked_seq: int = 0
    last_error: str | None = None


class _FlushMarker:
    """Put in the queue by ``flush``; set once everything before it is written."""

    def __init__(self) -> None:
        self.done = threading.Event()


class RunIO:
    """Spools one run's records off the training thread and, optionally, sends them."""

    def __init__(
        self,
        run_dir: Path,
        *,
        server: str | None = None,
        token: str | None = None,
        flush_interval: float = 0.2,
        max_pending: int = 10_000,
        transport: Transport | None = None,
    ) -> None:
        if not flush_interval > 0 or max_pending < 1:
            raise ConfigError(
                f"flush_interval must be > 0 and max_pending >= 1, got {flush_interval!r} "
                f"and {max_pending!r}"
            )
        self.run_dir = Path(run_dir)
        self._flush_interval = flush_interval
        self._max_pending = max_pending
        self._queue: deque[RecordSource | _FlushMarker] = deque()
        self._wake = threading.Event()
        self._stop_writer = False
        self._stop_sender = threading.Event()
        self._send_deadline: float | None = None
        self._retry_at = 0.0  # monotonic time before which the sender must not post again
        self._closed = False
        self._owns_transport = False
        self._disowned = False
        self._reported: set[str] = set()
        self._submitted = self._dropped_queue = self._written = self._internal = 0
        self.last_error: str | None = None
        self._spool = SpoolWriter(self.run_dir)
        self._sender = self._make_sender(server, token, transport)
        self._writer_thread = _start(self._write_loop, "gradwatch-writer")
        self._sender_thread = _start(self._send_loop, "gradwatch-sender") if self._sender else None
        _LIVE.add(self)

    def _make_sender(
        self, server: str | None, token: str | None, transport: Transport | None
    ) -> RunSender | None:
        if server is None and transport is None:
            return None
        from gradwatch.transport.sender import (  # only runs that send load http.client
            HTTPTransport,
            RunSender,
        )

        self._owns_transport = transport is None
        client = transport if transport is not None else HTTPTransport(str(server))
        return RunSender(self.run_dir, client, token=token)

    # --- training-thread side ----------------------------------------------------------

    def submit(self, source: RecordSource) -> None:
        """Queue a record (or a callable producing one); O(1), never blocks, never raises."""
        if self._disowned or self._closed:
            return
        self._submitted += 1
        if len(self._queue) >= self._max_pending:
            self._dropped_queue += 1
            return
        self._queue.append(source)

    def backlog(self) -> int:
        """How many records wait behind the one the writer is building (read on the writer
        thread by the checks: whether to yield the GIL, whether to skip a window)."""
        return len(self._queue)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted before this call is in the spool; True if so."""
        if self._disowned:
            return True
        if not self._writer_thread.is_alive():
            return not self._queue
        marker = _FlushMarker()
        self._queue.append(marker)
        self._wake.set()
        return marker.done.wait(max(timeout, 0.0))

    def close(self, timeout: float = 5.0) -> None:
        """Flush, make one last bounded send attempt, stop the threads; idempotent."""
        if self._disowned or self._closed:
            return
        deadline = time.monotonic() + max(timeout, 0.0)
        self.flush(timeout)
        self._closed = True
        self._stop_writer = True
        self._wake.set()
        self._writer_thread.join(max(deadline - time.monotonic(), 0.0))
        if self._sender_thread is not None:
            self._send_deadline = deadline
            self._stop_sender.set()
            self._sender_thread.join(max(deadline - time.monotonic(), 0.0))
        if not self._writer_thread.is_alive():
            self._spool.close()
        _LIVE.discard(self)

    @property
    def stats(self) -> IOStats:
        """A snapshot of the counters."""
        result = self._sender.result if self._sender is not None else None
        return IOStats(
            submitted=self._submitted,
            written=self._written,
            dropped_queue=self._dropped_queue,
            dropped_disk=self._spool.dropped,
            internal_errors=self._internal,
            sent_frames=result.sent if result else 0,
            acked_seq=result.acked_seq if result else read_acked(self.run_dir),
            last_error=self.last_error or (result.error if result else None),
        )

    # --- writer thread -----------------------------------------------------------------

    def _write_loop(self) -> None:
        # the rows' checks and the batch checksum run torch ops here: on one intra-op
        # thread, so that they never start a second OpenMP team beside the training
        # thread's (which slowed every training step; gradwatch.stats.intraop)
        from gradwatch.stats import intraop

        intraop.one_thread()
        while True:
            self._wake.wait(self._flush_interval)
            self._wake.clear()
            try:
                self._drain()
            except Exception as e:  # defensive: the loop itself must survive anything
                self._internal_error("writer", e)
            if self._stop_writer and not self._queue:
                return

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            item = queue.popleft()
            if isinstance(item, _FlushMarker):
                item.done.set()
            else:
                self._write_one(item)

    def _write_one(self, source: RecordSource) -> None:
        try:
            record = source if isinstance(source, Record) else source()
            if record is None:
                return
            seq = self._spool.append(record)
        except Exception as e:
            self._internal_error("record", e)
            return
        if seq:
            self._written += 1
        elif self._spool.error and "disk" not in self._reported:
            self._reported.add("disk")
            self.last_error = self._spool.error
            _warn(f"{self._spool.error}; records are being dropped and counted")

    def _internal_error(self, where: str, error: BaseException) -> None:
        self._internal += 1
        text = f"internal error in the {where} path: {type(error).__name__}: {error}"
        self.last_error = text
        if where not in self._reported:
            self._reported.add(where)
            _warn(f"{text} (counted; further ones are not shown)")

    # --- sender thread -----------------------------------------------------------------

    def _send_loop(self) -> None:
        assert self._sender is not None
        try:
            while not self._stop_sender.is_set():
                outcome = self._send_once(REQUEST_TIMEOUT)
                if outcome.status == "rejected":
                    return
                pause = _pause_after(outcome)
                self._retry_at = time.monotonic() + pause if outcome.retry_after else 0.0
                self._stop_sender.wait(pause)
            self._final_send()
        finally:
            close = getattr(self._sender.transport, "close", None)
            if self._owns_transport and close is not None:
                close()

    def _send_once(self, timeout: float) -> Outcome:
        """One sender step; internal errors count and become a 5 s retry."""
        assert self._sender is not None
        try:
            outcome = self._sender.step(timeout)
        except Exception as e:  # defensive: a bug in reading must not kill the thread
            self._internal_error("sender", e)
            from gradwatch.transport.sender import (
                Outcome,  # already loaded: this RunIO has a sender
            )

            return Outcome("retry", delay=5.0)
        if outcome.status == "rejected":
            _warn(f"{self._sender.result.error}; data stays in {self.run_dir} for sync")
        return outcome

    def _final_send(self) -> None:
        """Drain what the writer left, retrying a few times, always within the deadline."""
        deadline = self._send_deadline if self._send_deadline is not None else time.monotonic()
        # close() cut short a wait the server asked for (Retry-After): still honour it;
        # our own backoff is not waited out, the final attempts are few and bounded
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            if wait >= deadline - time.monotonic() - 0.05:
                return  # not allowed to send before the deadline: the rest is for sync
            time.sleep(wait)
        failures = 0
        while (left := deadline - time.monotonic()) > 0.05:
            outcome = self._send_once(min(left, REQUEST_TIMEOUT))
            if outcome.status in ("idle", "rejected"):
                return
            if outcome.status == "retry":
                failures += 1
                # the run's backoff may have grown long during an outage; close() is already
                # bounded by its deadline and FINAL_ATTEMPTS, so it does not wait that out
                delay = (
                    outcome.delay if outcome.retry_after else min(outcome.delay, FINAL_RETRY_DELAY)
                )
                if failures >= FINAL_ATTEMPTS or delay >= deadline - time.monotonic():
                    return
                time.sleep(delay)

    # --- fork -------------------------------------------------------------------------

    def _disown(self) -> None:
        """In a forked child: forget the queue and never touch the parent's threads."""
        self._disowned = True
        self._queue = deque()


def _pause_after(outcome: Outcome) -> float:
    """How long the sender waits before its next step."""
    if outcome.status == "retry":
        return outcome.delay
    return 0.0 if outcome.more else SEND_INTERVAL


def _start(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def _warn(message: str) -> None:
    # stderr may be closed or broken; reporting must never fail training.
    with contextlib.suppress(Exception):
        print(f"gradwatch: {message}", file=sys.stderr, flush=True)


_LIVE: weakref.WeakSet[RunIO] = weakref.WeakSet()


def _disown_all_in_child() -> None:
    for io in list(_LIVE):
        io._disown()
    _LIVE.clear()


def _flush_all_at_exit() -> None:
    """Safety net for runs not closed by their owner: write what is queued."""
    for io in list(_LIVE):
        io.flush(timeout=2.0)


os.register_at_fork(after_in_child=_disown_all_in_child)
atexit.register(_flush_all_at_exit)
