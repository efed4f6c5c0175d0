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
    result = await writer.store(job)  # or: writer.submit(job).result()
    writer.stop()
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
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

from gradwatch_server.db import make_engine, sqlite_file, write_session
from gradwatch_server.exceptions import RequestError
from gradwatch_server.ingest.frame_store import batchable, store_batch
from gradwatch_server.ingest.prepare_helper import HelperUnavailableError, PrepareHelper
from gradwatch_server.store import run_sql

log = logging.getLogger("gradwatch_server")
MAX_GROUP = 64
#: a request whose transaction the database failed (deadlock, lock timeout, lost
#: connection) is stored alone and tried again this many times before it gets the 503
RETRIES = 2
RETRY_PAUSE_S = 0.05  # before the first try again; twice that before the second
MAX_GROUP_BYTES = 32 << 20
#: a busy writer (its last group ended less than BUSY_GAP_S before the next job came)
#: waits up to GROUP_LINGER_S after taking a job for more to store in the same
#: transaction: a transaction's fixed cost (session, BEGIN, commit, waking the event
#: loop) is about half a ms of CPU, as much as storing a request of 10 steps × 300
#: tensors, so many small groups cost twice what fewer larger ones do
BUSY_GAP_S = 0.02
GROUP_LINGER_S = 0.003
#: on SQLite, the writer has the WAL checkpointed after this many bytes of bodies stored
CHECKPOINT_BYTES = 2 << 20


@dataclass
class IngestJob:
    """One request: ``prepare`` (decode and validate, no database) returns what ``store``
    (inside the group's transaction) stores; ``size`` is the body's length."""

    run_id: str
    size: int
    prepare: Callable[[], Any]
    store: Callable[[Session, Any], Any]
    #: the request body when ``prepare`` is ``prepare_body(run_id, body)``: the prepare
    #: helper process may then run it instead (gradwatch_server.ingest.prepare_helper)
    body: bytes | None = None
    #: the caller's access when ``store`` is ``store_in(session, access, run_id, rows)``:
    #: the writer may then store the job together with others of its group
    #: (``frame_store.store_batch``)
    access: Any = None
    future: Future[Any] = field(default_factory=Future)
    #: set by ``IngestWriter.store``: the event loop waiting for the job, woken once per
    #: group (not once per job, as ``asyncio.wrap_future`` would)
    waiter: asyncio.Future[None] | None = None


HELPER_POLICIES = ("off", "busy", "on")
#: seconds after a prepare helper died before another is started
HELPER_RESTART_S = 10.0


class IngestWriter:
    """The threads of one engine (prepare, write, and on SQLite checkpoint); started on
    the first ``submit``.

    ``helper``: when the prepare thread hands jobs with a ``body`` to a prepare helper
    process (:mod:`gradwatch_server.ingest.prepare_helper`): ``"off"`` never, ``"on"`` from the
    first job, ``"busy"`` once the thread takes a job while others wait (a server under
    a few requests a second never starts one). Until the helper is ready, after it died,
    and for a job it cannot prepare, the thread prepares the job itself.
    """

    def __init__(self, engine: Engine, helper: str = "off") -> None:
        if helper not in HELPER_POLICIES:
            raise ValueError(f"helper must be one of {HELPER_POLICIES}, got {helper!r}")
        self.engine = engine
        self.helper_policy = helper
        self._helper: PrepareHelper | None = None
        self._reader: threading.Thread | None = None
        self._pending: collections.deque[IngestJob] = collections.deque()
        self._link_lock = threading.Lock()
        self._helper_closing = False
        self._helper_died_at = -HELPER_RESTART_S
        self.helper_starts = 0
        self._queue: queue.SimpleQueue[IngestJob | None] = queue.SimpleQueue()
        self._ready: queue.SimpleQueue[tuple[IngestJob, Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._checkpointer: Checkpointer | None = None
        self._own_engine: Engine | None = None
        self._stopped = False
        self._queued_bytes = 0
        self._rate = 0.0  # bytes per second of body stored, averaged over recent groups
        self._last_group_end = -1.0
        self.groups = 0
        self.jobs = 0

    def _write_engine(self) -> Engine:
        """The engine the writer stores with: on a SQLite file one of its own, with one
        connection, whose page cache stays warm (a connection of the shared pool loses
        its cache whenever another connection wrote since it last ran)."""
        if self._own_engine is None:
            if _sqlite_file(self.engine):
                self._own_engine = make_engine(
                    self.engine.url.render_as_string(hide_password=False), pool_size=1
                )
            else:
                self._own_engine = self.engine
        return self._own_engine

    def backlog(self) -> int:
        """Bytes of request bodies queued and not yet taken by a thread (waiting to be
        prepared, or prepared and waiting for the writer)."""
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
            if not self._threads:
                self._checkpointer = Checkpointer.for_engine(self.engine)
                self._threads = [
                    threading.Thread(
                        target=self._prepare_loop, name="gradwatch-prepare", daemon=True
                    ),
                    threading.Thread(target=self._loop, name="gradwatch-ingest", daemon=True),
                ]
                for thread in self._threads:
                    thread.start()
            self._queued_bytes += job.size
            self._queue.put(job)
        return job.future

    async def store(self, job: IngestJob) -> Any:
        """``submit`` from an event loop: the result of ``store`` (or its exception).

        The writer wakes the loop once for all the jobs of a group it answered, with one
        ``call_soon_threadsafe``: per job, the chained futures of ``asyncio.wrap_future``
        (a callback, a thread-safe call and a wake-up each) cost the event loop thread
        more than its share of reading the request.
        """
        job.waiter = asyncio.get_running_loop().create_future()
        future = self.submit(job)
        if not future.done():
            await job.waiter
        return future.result()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the queued jobs and end the threads (a later ``submit`` starts new ones)."""
        with self._lock:
            self._stopped = True
            threads, self._threads = self._threads, []
            checkpointer, self._checkpointer = self._checkpointer, None
            if threads:
                self._queue.put(None)
        for thread in threads:
            thread.join(timeout)
        if checkpointer is not None:
            checkpointer.stop(timeout)
        own, self._own_engine = self._own_engine, None
        if own is not None and own is not self.engine:
            own.dispose()
        helper, self._helper = self._helper, None
        self._reader = None
        if helper is not None:
            helper.stop(timeout)
        self._helper_closing = False
        with self._lock:
            self._stopped = False

    def _prepare_loop(self) -> None:
        """Decode and validate each job as it comes (no database), then hand it to the
        writer: this runs while the writer waits on the database (commit, inserts), which
        release the GIL. With a prepare helper, jobs are sent to it as they come (several
        in flight) and ``_read_helper`` hands its replies on in order."""
        while True:
            job = self._queue.get()
            if job is None:
                self._end_helper_link()
                self._ready.put(None)
                return
            with self._lock:
                self._queued_bytes -= job.size
            if job.body is not None and self._send_to_helper(job):
                continue
            self._forward(job, job.prepare)

    def _forward(self, job: IngestJob, prepare: Callable[[], Any]) -> None:
        """Run ``prepare`` and queue the job for the writer, or answer its error."""
        try:
            prepared = prepare()
        except BaseException as e:  # its request gets the error; the thread goes on
            job.future.set_exception(e)
            _wake([job])
            return
        with self._lock:
            self._queued_bytes += job.size
        self._ready.put((job, prepared))

    def _send_to_helper(self, job: IngestJob) -> bool:
        """Send the job to a ready helper (True), or False: prepare it here."""
        helper = self._prepare_helper()
        if helper is None or job.body is None:
            return False
        with self._link_lock:
            if helper.dead or self._reader is None:
                return False
            self._pending.append(job)
            try:
                helper.send(job.run_id, job.body)
            except OSError:
                self._pending.pop()
                helper.kill()  # its reader sees the end and prepares what is pending
                return False
        return True

    def _read_helper(self, helper: PrepareHelper) -> None:
        """The helper's replies, in the order sent, handed to the writer; when the child
        ends (stopped or died), the jobs it did not answer are prepared here."""
        while True:
            try:
                status, payload = helper.receive()
            except (OSError, EOFError, ValueError):
                break
            job = self._pending.popleft()
            self._forward(job, functools.partial(_decoded, helper, status, payload, job))
        with self._link_lock:
            if not self._helper_closing:
                log.warning("ingest prepare helper stopped; preparing on a thread")
            helper.died()
            left = list(self._pending)
            self._pending.clear()
        for job in left:
            self._forward(job, job.prepare)

    def _end_helper_link(self) -> None:
        """At stop: let the helper answer what it was sent, and wait for its reader."""
        helper, reader = self._helper, self._reader
        if helper is None or reader is None:
            return
        self._helper_closing = True
        helper.close_input()
        reader.join(30)

    def start_helper(self) -> None:
        """Start the prepare helper now (policy ``"on"``: at the app's start, so that its
        imports are done before the first requests); a no-op otherwise."""
        with self._lock:
            if self.helper_policy != "on" or self._helper is not None or self._stopped:
                return
            try:
                self._helper = PrepareHelper.start()
            except OSError as e:
                log.warning("cannot start the ingest prepare helper (%s)", e)
                return
            self.helper_starts += 1

    def helper_started(self) -> bool:
        """Whether the prepare helper is ready, or none is coming (never blocks): a server
        waits for this before it takes requests, so that the first burst of them (every
        run's first request at once) is not prepared on its own, busy, thread."""
        helper = self._helper
        return helper is None or helper.dead or helper.is_ready()

    def _prepare_helper(self) -> PrepareHelper | None:
        """The helper to use now (None: prepare on this thread); starts one as the policy
        says (the prepare thread only calls this)."""
        helper = self._helper
        if helper is not None:
            if helper.dead:
                self._helper, self._reader = None, None
                self._helper_died_at = time.monotonic()
                return None
            if not helper.is_ready():
                return None
            if self._reader is None:
                self._reader = threading.Thread(
                    target=self._read_helper, args=(helper,), name="gradwatch-helper", daemon=True
                )
                self._reader.start()
            return helper
        policy = self.helper_policy
        if policy == "off" or (policy == "busy" and self._queue.empty()):
            return None
        if time.monotonic() - self._helper_died_at < HELPER_RESTART_S:
            return None
        try:
            self._helper = PrepareHelper.start()
        except OSError as e:
            log.warning("cannot start the ingest prepare helper (%s); preparing on a thread", e)
            self._helper_died_at = time.monotonic()
            return None
        self.helper_starts += 1
        return None  # it is starting: this job here

    def _loop(self) -> None:
        while True:
            item = self._ready.get()
            if item is None:
                return
            group, size, last = [item], item[0].size, False
            taken = time.monotonic()
            busy = taken - self._last_group_end < BUSY_GAP_S
            while len(group) < MAX_GROUP and size < MAX_GROUP_BYTES:
                try:
                    more = self._ready.get_nowait()
                except queue.Empty:
                    left = taken + GROUP_LINGER_S - time.monotonic()
                    if not busy or left <= 0:
                        break
                    try:
                        more = self._ready.get(timeout=left)
                    except queue.Empty:
                        break
                if more is None:
                    last = True
                    break
                group.append(more)
                size += more[0].size
            with self._lock:
                self._queued_bytes -= size
            started = time.perf_counter()
            try:
                self._store_ready(group)
            except BaseException as e:  # defensive: the thread must answer and survive
                for j, _ in group:
                    if not j.future.done():
                        j.future.set_exception(e)
                _wake([j for j, _ in group])
            self._last_group_end = time.monotonic()
            rate = size / max(time.perf_counter() - started, 1e-6)
            self._rate = rate if self._rate <= 0 else 0.8 * self._rate + 0.2 * rate
            if self._checkpointer is not None:
                self._checkpointer.wrote(size)
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
        self._store_ready(ready)

    def _store_ready(self, ready: list[tuple[IngestJob, Any]]) -> None:
        """Store prepared jobs in one transaction and answer them."""
        if not ready:
            return
        ready.sort(key=lambda item: item[0].run_id)
        self.groups += 1
        self.jobs += len(ready)
        outcomes: dict[int, tuple[bool, Any]] = {}
        try:
            with write_session(self._write_engine()) as session:
                outcomes = _in_batch(session, ready)
                for job, prepared in ready:
                    if id(job) not in outcomes:
                        outcomes[id(job)] = _in_savepoint(session, job, prepared)
        except (OperationalError, GroupBrokenError) as e:
            log.info("ingest group of %d failed (%s); storing one by one", len(ready), e)
            self._one_by_one(ready)
            _wake([job for job, _ in ready])
            return
        for job, _ in ready:
            ok, value = outcomes[id(job)]
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)
        _wake([job for job, _ in ready])

    def _one_by_one(self, ready: list[tuple[IngestJob, Any]]) -> None:
        """Each job in a transaction of its own, tried again up to :data:`RETRIES` times
        when the database fails it (a deadlock between two servers, a lock timeout): its
        request gets the 503 only when every try failed."""
        for job, prepared in ready:
            for attempt in range(RETRIES + 1):
                try:
                    with write_session(self._write_engine()) as session:
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


class Checkpointer:
    """SQLite's WAL checkpoints on a thread of their own (``gradwatch-checkpoint``).

    Left to SQLite, the connection whose commit takes the WAL past 1,000 pages copies them
    into the database file and syncs both, inside that commit: the writer thread, and every
    request waiting on it, stood still for it. Here the writer only counts what it stored
    (``wrote``) and every ``CHECKPOINT_BYTES`` wakes this thread, which runs a PASSIVE
    checkpoint on a connection of its own while the writer goes on (SQLite lets one
    checkpointer and one writer work at once, and releases the GIL for both). SQLite's own
    checkpoint stays as the fallback: should this thread fall behind, the WAL still
    reaches 1,000 pages and the next commit checkpoints as before. Durability is
    unchanged: a commit is in the WAL before its reply, whoever checkpoints it.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.checkpoints = 0
        self._due = threading.Event()
        self._stopping = False
        self._bytes = 0
        self._thread = threading.Thread(target=self._loop, name="gradwatch-checkpoint", daemon=True)

    @classmethod
    def for_engine(cls, engine: Engine) -> Checkpointer | None:
        """A started checkpointer for a SQLite file; None for PostgreSQL and memory."""
        if not _sqlite_file(engine):
            return None
        checkpointer = cls(engine)
        checkpointer._thread.start()
        return checkpointer

    def wrote(self, size: int) -> None:
        """The writer committed ``size`` bytes of request bodies."""
        self._bytes += size
        if self._bytes >= CHECKPOINT_BYTES:
            self._bytes = 0
            self._due.set()

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread (after the checkpoint under way, if any)."""
        self._stopping = True
        self._due.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            if self._stopping:
                return
            try:
                self.checkpoint()
            except Exception as e:  # SQLite's own checkpoint still runs at commit
                log.info("WAL checkpoint failed (%s: %s)", type(e).__name__, e)

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: SQLite's (busy, WAL pages, pages checkpointed)."""
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            row = cursor.fetchone()
            cursor.close()
        finally:
            raw.close()
        self.checkpoints += 1
        busy, pages, done = row if row is not None else (1, -1, -1)
        return int(busy), int(pages), int(done)


def _decoded(helper: PrepareHelper, status: int, payload: bytes, job: IngestJob) -> Any:
    """A helper's reply as the job's rows (or its RequestError); a reply it could not
    give (an unexpected error there) is prepared again here, to raise what it raises."""
    try:
        return helper.decode(status, payload)
    except HelperUnavailableError:
        return job.prepare()


def _wake(jobs: list[IngestJob]) -> None:
    """Wake the event loops waiting for ``jobs`` (answered): one call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for job in jobs:
        if job.waiter is not None:
            by_loop.setdefault(job.waiter.get_loop(), []).append(job.waiter)
    for loop, waiters in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_release, waiters)


def _release(waiters: list[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():  # a cancelled request's waiter is done already
            waiter.set_result(None)


def _sqlite_file(engine: Engine) -> bool:
    """Whether ``engine`` is a SQLite database in a file (not in memory, not PostgreSQL)."""
    return sqlite_file(engine.url) is not None


class GroupBrokenError(Exception):
    """A job failed in a way that left the group's session unusable (a failed ORM
    flush): the group is stored again one job per transaction."""


_SAVEPOINT = "gradwatch_ingest_job"
_BATCH_SAVEPOINT = "gradwatch_ingest_batch"


def _in_batch(session: Session, ready: list[tuple[IngestJob, Any]]) -> dict[int, tuple[bool, Any]]:
    """Store the group's plain requests of stored runs together (``store_batch``: a few
    statements for all of them instead of about seven per request), in a savepoint of
    their own: the outcomes by ``id(job)`` of the jobs it answered; every other job (a
    run's first request, findings, a second request of the same run in this group, a
    job without ``access``) is left to its own savepoint. Should the batch fail
    (anything but the database failing the transaction), it is rolled back and every
    one of its jobs is stored alone."""
    items: list[tuple[IngestJob, Any]] = []
    runs: set[str] = set()
    for job, prepared in ready:
        if job.access is None or job.run_id in runs or not batchable(prepared):
            continue
        runs.add(job.run_id)
        items.append((job, prepared))
    if len(items) < 2:
        return {}
    run_sql(session, f"SAVEPOINT {_BATCH_SAVEPOINT}")
    try:
        results = store_batch(session, [(j.run_id, j.access, p) for j, p in items])
        run_sql(session, f"RELEASE SAVEPOINT {_BATCH_SAVEPOINT}")
    except OperationalError:
        raise
    except Exception as e:
        _roll_back_to(session, _BATCH_SAVEPOINT, e)
        log.info("ingest batch of %d failed (%s); storing one by one", len(items), e)
        return {}
    out: dict[int, tuple[bool, Any]] = {}
    for (job, _), result in zip(items, results, strict=True):
        if isinstance(result, RequestError):
            out[id(job)] = (False, result)
        elif result is not None:
            out[id(job)] = (True, result)
    return out


def _in_savepoint(session: Session, job: IngestJob, prepared: Any) -> tuple[bool, Any]:
    """(True, result) or (False, the exception) of one job; a database failure of the
    whole transaction (OperationalError) is raised to fail the group.

    The savepoint is plain SQL on the session's connection (``run_sql``), not
    SQLAlchemy's nested transaction, whose bookkeeping and two compiled statements cost
    more than the savepoint itself. The job's ORM changes are flushed before the release;
    after a rollback to the savepoint the session forgets every object it holds (they may
    hold what was rolled back; the earlier jobs' changes were flushed), and a session the
    failure left unusable fails the group into one-by-one storing (``GroupBrokenError``).
    """
    run_sql(session, f"SAVEPOINT {_SAVEPOINT}")
    try:
        value = job.store(session, prepared)
        session.flush()
        run_sql(session, f"RELEASE SAVEPOINT {_SAVEPOINT}")
    except OperationalError:
        raise
    except Exception as e:
        _roll_back_to(session, _SAVEPOINT, e)
        return False, e
    return True, value


def _roll_back_to(session: Session, savepoint: str, error: Exception) -> None:
    """Undo what failed with ``error`` since ``savepoint`` and forget every object the
    session holds (they may hold what was rolled back); a session the failure left
    unusable fails the group into one-by-one storing (``GroupBrokenError``)."""
    if not session.is_active:
        raise GroupBrokenError(f"{type(error).__name__}: {error}") from error
    run_sql(session, f"ROLLBACK TO SAVEPOINT {savepoint}")
    run_sql(session, f"RELEASE SAVEPOINT {savepoint}")
    session.expunge_all()
