"""Group commit for ingest: one writer thread per app stores many requests per transaction.

Every ingest request becomes a job on a queue; one daemon thread ``gradwatch-ingest``
takes what has queued (up to ``MAX_GROUP`` jobs or ``MAX_GROUP_BYTES`` of frames),
decodes and validates each job on its own (a bad body fails only its own request), then
stores the valid ones in ONE write transaction, each inside its own savepoint, and
answers every request only after that transaction committed. So:

- a reply still means "stored and committed" (the crash guarantees are unchanged), and
  the same ``ingest_frames`` stores each frame exactly once per ``(run, seq)``;
- a request that fails inside the transaction (404/403 from the access check, a bad row)
  rolls back to its savepoint and gets its own error; the others commit;
- a database failure of the group (a lock timeout, a PostgreSQL deadlock, a lost
  connection) rolls the whole group back, and each job is then stored alone in its own
  transaction, tried again up to ``RETRIES`` times when the database fails it again; only
  a request that fails every try gets the 503;
- jobs are stored in run-id order, so two server processes take row locks in one order.

Backpressure: ``backlog()`` is the bytes of requests queued and not yet taken; the route
answers 503 with ``Retry-After`` (``retry_after()``: the backlog over the recent rate of
storing, 1-30 s) instead of queueing past ``Settings.ingest_backlog_bytes``, so latency
stays bounded and the collectors back off (they keep their data in their spools).

The point is cost, not parallelism: SQLite has one writer anyway, and N threads waiting
on its lock (busy-wait sleeps) plus one BEGIN/COMMIT per request dominated ingest under
many live runs; one thread and one commit per group do not.

Example::

    writer = IngestWriter(engine)
    result = await asyncio.wrap_future(writer.submit(job))
    writer.stop()
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from gradwatch.server.db import write_session

log = logging.getLogger("gradwatch.server")
MAX_GROUP = 64
#: a request whose transaction the database failed (deadlock, lock timeout, lost
#: connection) is stored alone and tried again this many times before it gets the 503
RETRIES = 2
RETRY_PAUSE_S = 0.05  # before the first try again; twice that before the second
MAX_GROUP_BYTES = 32 << 20


@dataclass
class IngestJob:
    """One request: ``prepare`` (decode and validate, no database) returns what ``store``
    (inside the group's transaction) stores; ``size`` is the body's length."""

    run_id: str
    size: int
    prepare: Callable[[], Any]
    store: Callable[[Session, Any], Any]
    future: Future[Any] = field(default_factory=Future)


class IngestWriter:
    """The writer thread of one engine; started on the first ``submit``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._queue: queue.SimpleQueue[IngestJob | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._queued_bytes = 0
        self._rate = 0.0  # bytes per second of body stored, averaged over recent groups
        self.groups = 0
        self.jobs = 0

    def backlog(self) -> int:
        """Bytes of request bodies queued and not yet taken by the thread."""
        return self._queued_bytes

    def retry_after(self) -> int:
        """Seconds a refused client should wait: the backlog at the recent rate, 1-30 s."""
        if self._rate <= 0:
            return 1
        return max(1, min(30, math.ceil(self._queued_bytes / self._rate)))

    def submit(self, job: IngestJob) -> Future[Any]:
        """Queue ``job``; its future gets the result of ``store`` or the exception."""
        with self._lock:
            if self._stopped:
                job.future.set_exception(RuntimeError("the server is shutting down"))
                return job.future
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="gradwatch-ingest", daemon=True
                )
                self._thread.start()
            self._queued_bytes += job.size
            self._queue.put(job)
        return job.future

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the queued jobs and end the thread (a later ``submit`` starts a new one)."""
        with self._lock:
            self._stopped = True
            thread, self._thread = self._thread, None
            if thread is not None:
                self._queue.put(None)
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            self._stopped = False

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            group, size, last = [job], job.size, False
            while len(group) < MAX_GROUP and size < MAX_GROUP_BYTES:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    last = True
                    break
                group.append(more)
                size += more.size
            with self._lock:
                self._queued_bytes -= size
            started = time.perf_counter()
            try:
                self.store_group(group)
            except BaseException as e:  # defensive: the thread must answer and survive
                for j in group:
                    if not j.future.done():
                        j.future.set_exception(e)
            rate = size / max(time.perf_counter() - started, 1e-6)
            self._rate = rate if self._rate <= 0 else 0.8 * self._rate + 0.2 * rate
            if last:
                return

    def store_group(self, group: list[IngestJob]) -> None:
        """Prepare, store in one transaction and answer a group of jobs (the thread calls
        this; tests call it to make one group for sure)."""
        ready: list[tuple[IngestJob, Any]] = []
        for job in group:
            try:
                ready.append((job, job.prepare()))
            except Exception as e:
                job.future.set_exception(e)
        if not ready:
            return
        ready.sort(key=lambda item: item[0].run_id)
        self.groups += 1
        self.jobs += len(ready)
        outcomes: list[tuple[bool, Any]] = []
        try:
            with write_session(self.engine) as session:
                for job, prepared in ready:
                    outcomes.append(_in_savepoint(session, job, prepared))
        except OperationalError as e:
            log.info("ingest group of %d failed (%s); storing one by one", len(ready), e)
            self._one_by_one(ready)
            return
        for (job, _), (ok, value) in zip(ready, outcomes, strict=True):
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)

    def _one_by_one(self, ready: list[tuple[IngestJob, Any]]) -> None:
        """Each job in a transaction of its own, tried again up to :data:`RETRIES` times
        when the database fails it (a deadlock between two servers, a lock timeout): its
        request gets the 503 only when every try failed."""
        for job, prepared in ready:
            for attempt in range(RETRIES + 1):
                try:
                    with write_session(self.engine) as session:
                        value = job.store(session, prepared)
                except OperationalError as e:
                    if attempt < RETRIES:
                        time.sleep(RETRY_PAUSE_S * (attempt + 1))
                        continue
                    job.future.set_exception(e)
                except Exception as e:
                    job.future.set_exception(e)
                else:
                    job.future.set_result(value)
                break


def _in_savepoint(session: Session, job: IngestJob, prepared: Any) -> tuple[bool, Any]:
    """(True, result) or (False, the exception) of one job; a database failure of the
    whole transaction (OperationalError) is raised to fail the group."""
    savepoint = session.begin_nested()
    try:
        value = job.store(session, prepared)
        savepoint.commit()
    except OperationalError:
        raise
    except Exception as e:
        savepoint.rollback()
        return False, e
    return True, value
