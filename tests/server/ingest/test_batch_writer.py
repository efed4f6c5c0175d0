"""Group commit: one transaction for many requests, each failing or succeeding alone."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlmodel import Session

from gradwatch_server.api.routes.ingest import store_in
from gradwatch_server.auth import Access
from gradwatch_server.db import make_engine
from gradwatch_server.exceptions import RequestError
from gradwatch_server.ingest.batch_writer import IngestJob, IngestWriter
from gradwatch_server.ingest.frame_store import decode_body, parse_frames
from gradwatch_server.migrate import migrate
from gradwatch_server.models import IngestedFrame, Run
from tests.server.frames import simple_run

OPEN = Access(None, None)


def _job(run: str, body: bytes, access: Access = OPEN) -> IngestJob:
    return IngestJob(
        run,
        len(body),
        prepare=lambda: parse_frames(run, decode_body(body)),
        store=lambda session, parsed: store_in(session, access, run, parsed),
    )


def _frames(session: Session, run: str) -> int:
    query = select(func.count()).select_from(IngestedFrame).where(IngestedFrame.run_id == run)  # type: ignore[arg-type]
    return int(session.execute(query).scalar_one())


def _error(future: Future[Any]) -> BaseException | None:
    return future.exception(timeout=0)


def test_one_group_stores_the_good_requests_and_fails_the_bad_alone(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)
    a, b = simple_run("run-a"), simple_run("run-b")
    jobs = [
        _job("run-a", b"".join(a)),
        _job("run-b", b"".join(b[:2])),
        _job("run-b", b"".join(b)),  # overlaps the one before it in the same transaction
        _job("run-c", b"GW\x01garbage"),  # fails in prepare: 400
        _job("run-d", b"".join(simple_run("run-d")), Access("elsewhere", "write")),  # 403
    ]
    writer.store_group(jobs)
    assert jobs[0].future.result(timeout=0).accepted == 5
    assert jobs[1].future.result(timeout=0).accepted == 2
    assert (jobs[2].future.result(timeout=0).accepted, jobs[2].future.result().duplicates) == (
        3,
        2,
    )
    bad_body, forbidden = _error(jobs[3].future), _error(jobs[4].future)
    assert isinstance(bad_body, RequestError) and bad_body.status == 400
    assert isinstance(forbidden, RequestError) and forbidden.status == 403
    with Session(engine) as session:
        assert (_frames(session, "run-a"), _frames(session, "run-b")) == (5, 5)
        assert session.get(Run, "run-d") is None  # rolled back to its savepoint
        assert session.get(Run, "run-a") is not None
    writer.stop()
    engine.dispose()


def test_the_thread_answers_every_request_after_its_commit(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)

    async def send_all() -> list[Any]:
        futures = [
            asyncio.wrap_future(writer.submit(_job(f"run-{i}", b"".join(simple_run(f"run-{i}")))))
            for i in range(30)
        ]
        return await asyncio.gather(*futures)

    results = asyncio.run(send_all())
    assert [r.accepted for r in results] == [5] * 30
    assert writer.jobs == 30 and 1 <= writer.groups <= 30
    with Session(engine) as session:
        assert all(_frames(session, f"run-{i}") == 5 for i in range(30))
    writer.stop()
    with pytest.raises(RequestError):  # a restarted writer still answers with the error
        writer.submit(_job("x", b"")).result(timeout=30)
    engine.dispose()


def test_store_answers_an_event_loop_once_per_group(db_url: str) -> None:
    """``store`` (what the route awaits): every job's result or error, a cancelled
    request's waiter left alone, and an error after the writer stopped."""
    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)

    async def send_all() -> list[Any]:
        jobs = [_job(f"run-{i}", b"".join(simple_run(f"run-{i}"))) for i in range(30)]
        jobs.append(_job("bad", b"not frames"))
        cancelled = asyncio.ensure_future(writer.store(_job("gone", b"".join(simple_run("gone")))))
        await asyncio.sleep(0)
        cancelled.cancel()
        return await asyncio.gather(*[writer.store(j) for j in jobs], return_exceptions=True)

    results = asyncio.run(send_all())
    assert [r.accepted for r in results[:30]] == [5] * 30
    assert isinstance(results[30], RequestError) and results[30].status == 400
    writer.stop()
    writer._stopped = True  # as during stop: a job submitted then is refused at once
    with pytest.raises(RuntimeError, match="shutting down"):
        asyncio.run(writer.store(_job("late", b"".join(simple_run("late")))))
    writer._stopped = False
    with Session(engine) as session:
        assert _frames(session, "run-29") == 5
    engine.dispose()


def test_a_request_the_database_fails_once_is_tried_again_before_any_503(db_url: str) -> None:
    """A deadlock between two servers or a lock timeout fails one transaction, not the
    request: it is stored alone and tried again (``RETRIES``); only a request that fails
    every try gets the 503 (a database failure injected into the job's store)."""
    from sqlalchemy.exc import OperationalError

    from gradwatch_server.ingest.batch_writer import RETRIES

    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)

    def failing(times: int, run: str) -> IngestJob:
        job = _job(run, b"".join(simple_run(run)))
        store, left = job.store, [times]

        def flaky(session: Session, parsed: Any) -> Any:
            if left[0] > 0:
                left[0] -= 1
                raise OperationalError("INSERT ...", {}, Exception("deadlock detected"))
            return store(session, parsed)

        job.store = flaky
        return job

    once, always, fine = (
        failing(1, "run-a"),
        failing(RETRIES + 9, "run-b"),
        _job("run-c", b"".join(simple_run("run-c"))),
    )
    writer.store_group([once, always, fine])
    assert once.future.result(timeout=0).accepted == 5  # stored on a try again
    assert fine.future.result(timeout=0).accepted == 5  # stored alone after the group failed
    assert isinstance(_error(always.future), OperationalError)  # every try failed: 503
    with Session(engine) as session:
        assert (_frames(session, "run-a"), _frames(session, "run-b")) == (5, 0)
        assert _frames(session, "run-c") == 5
    writer.stop()
    engine.dispose()


def test_a_job_is_prepared_on_its_own_thread_while_the_writer_stores(db_url: str) -> None:
    """Decoding and validation run on ``gradwatch-prepare``, storing on
    ``gradwatch-ingest``; a job that fails in prepare is answered from there and never
    reaches the writer, and the others are stored."""
    import threading

    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)
    seen: dict[str, str] = {}

    def traced(run: str, body: bytes) -> IngestJob:
        job = _job(run, body)
        prepare, store = job.prepare, job.store

        def prepare_traced() -> Any:
            seen[f"{run}:prepare"] = threading.current_thread().name
            return prepare()

        def store_traced(session: Session, parsed: Any) -> Any:
            seen[f"{run}:store"] = threading.current_thread().name
            return store(session, parsed)

        job.prepare, job.store = prepare_traced, store_traced
        return job

    good, bad = traced("run-a", b"".join(simple_run("run-a"))), traced("run-b", b"GW\x01x")
    writer.submit(good), writer.submit(bad)
    assert good.future.result(timeout=30).accepted == 5
    assert isinstance(bad.future.exception(timeout=30), RequestError)
    assert seen == {
        "run-a:prepare": "gradwatch-prepare",
        "run-a:store": "gradwatch-ingest",
        "run-b:prepare": "gradwatch-prepare",
    }
    assert writer.backlog() == 0
    writer.stop()
    engine.dispose()


def test_sqlite_wal_checkpoints_run_on_a_thread_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a SQLite file the writer wakes ``gradwatch-checkpoint`` every
    ``CHECKPOINT_BYTES`` stored; its PASSIVE checkpoint copies the WAL into the database
    file while the writer goes on, and every stored frame is read back after it."""
    from gradwatch_server.ingest import batch_writer

    monkeypatch.setattr(batch_writer, "CHECKPOINT_BYTES", 1)
    engine = make_engine(f"sqlite:///{tmp_path / 'gw.db'}")
    migrate(engine)
    writer = IngestWriter(engine)
    futures = [writer.submit(_job(f"run-{i}", b"".join(simple_run(f"run-{i}")))) for i in range(8)]
    assert [f.result(timeout=30).accepted for f in futures] == [5] * 8
    checkpointer = writer._checkpointer
    assert checkpointer is not None and checkpointer._thread.name == "gradwatch-checkpoint"
    deadline = time.monotonic() + 30
    while checkpointer.checkpoints == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpointer.checkpoints >= 1
    writer.stop()
    assert not checkpointer._thread.is_alive()
    busy, pages, done = checkpointer.checkpoint()  # nothing under way: all copied
    assert busy == 0 and done == pages
    with Session(engine) as session:
        assert all(_frames(session, f"run-{i}") == 5 for i in range(8))
    engine.dispose()


def test_no_checkpointer_where_sqlite_does_not_keep_a_wal(pg_url: str) -> None:
    from gradwatch_server.ingest.batch_writer import Checkpointer

    for url in (pg_url, "sqlite://"):
        engine = make_engine(url)
        assert Checkpointer.for_engine(engine) is None
        engine.dispose()


def test_a_job_whose_flush_fails_fails_alone_and_the_group_is_stored(db_url: str) -> None:
    """A job's ORM change that fails at flush leaves the group's session unusable: the
    group is stored again one job per transaction, the bad job gets its own error and the
    others (before and after it in the group) are stored once."""
    from sqlalchemy.exc import IntegrityError

    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)
    bad = _job("run-b", b"".join(simple_run("run-b")))
    store = bad.store

    def duplicate_run(session: Session, parsed: Any) -> Any:
        result = store(session, parsed)
        session.add(Run(id="run-b", project_id=1, received_at=0.0))  # its key exists: flush fails
        return result

    bad.store = duplicate_run
    jobs = [_job("run-a", b"".join(simple_run("run-a"))), bad]
    jobs.append(_job("run-c", b"".join(simple_run("run-c"))))
    writer.store_group(jobs)
    assert jobs[0].future.result(timeout=0).accepted == 5
    assert isinstance(_error(bad.future), IntegrityError)
    assert jobs[2].future.result(timeout=0).accepted == 5
    with Session(engine) as session:
        assert (_frames(session, "run-a"), _frames(session, "run-c")) == (5, 5)
        assert _frames(session, "run-b") == 0 and session.get(Run, "run-b") is None
    writer.stop()
    engine.dispose()


def test_on_a_sqlite_file_the_writer_stores_through_one_connection_of_its_own(
    db_url: str,
) -> None:
    """On a SQLite file the writer's engine is its own, with one connection (its page
    cache stays warm); on PostgreSQL it stores through the app's engine. Either way what
    it stores is read back through the app's engine."""
    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)
    assert writer.submit(_job("run-a", b"".join(simple_run("run-a")))).result(30).accepted == 5
    own = writer._write_engine()
    if engine.dialect.name == "sqlite":
        assert own is not engine and own.url == engine.url
        assert own.pool.size() == 1  # type: ignore[attr-defined]
    else:
        assert own is engine
    with Session(engine) as session:
        assert _frames(session, "run-a") == 5
    writer.stop()
    assert writer._own_engine is None  # disposed with the writer
    engine.dispose()


def _batch_job(run: str, body: bytes, access: Access = OPEN) -> IngestJob:
    """A job as the route makes it: with its access, so the writer may batch it."""
    job = _job(run, body, access)
    job.access = access
    return job


def _run_columns(session: Session, run: str) -> tuple[Any, ...]:
    row = session.get(Run, run)
    assert row is not None
    return (row.steps, row.last_t, row.frames, row.end_status)


def _blobs(session: Session, run: str) -> list[tuple[Any, ...]]:
    from gradwatch_server.models import SeriesBlob

    query = select(SeriesBlob.seq, SeriesBlob.name, SeriesBlob.dtype, SeriesBlob.data).where(  # type: ignore[call-overload]
        SeriesBlob.run_id == run
    )
    return sorted(tuple(r) for r in session.execute(query))


def test_requests_of_stored_runs_are_stored_together_as_each_would_be_alone(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain requests of stored runs in one group go through ``store_batch`` (a few
    statements for all); runs, frames and blobs come out as storing each request alone
    does, replays count as duplicates, a second request of a run in the same group, a
    run's first request and a request of a project the token cannot see are answered
    as before."""
    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)
    runs = ["run-a", "run-b", "run-c"]
    bodies = {r: simple_run(r) for r in [*runs, *(f"alone-{r}" for r in runs)]}
    # every run's RUN_START and first STEPS window first, one group
    writer.store_group([_batch_job(r, b"".join(f[:2])) for r, f in bodies.items()])
    secret = simple_run("run-s", project="secret")
    writer.store_group([_job("run-s", b"".join(secret[:2]))])

    def rest(run: str) -> list[IngestJob]:
        f = bodies[run]
        return [
            _batch_job(run, b"".join(f[2:4])),  # new: STEPS + HEARTBEAT
            _batch_job(run, b"".join(f[1:3])),  # a replay, half of it new in the job above
        ]

    group = [j for r in runs for j in rest(r)]
    group.append(_batch_job("run-new", b"".join(simple_run("run-new")[1:3])))  # no start
    group.append(_batch_job("run-s", b"".join(secret[2:4]), Access("default", "write")))
    from gradwatch_server.ingest import batch_writer

    batched: list[list[str]] = []
    real = batch_writer.store_batch

    def spy(session: Session, items: list[Any]) -> Any:
        batched.append([run for run, _, _ in items])
        return real(session, items)

    monkeypatch.setattr(batch_writer, "store_batch", spy)
    writer.store_group(group)
    # one batch: the first request of each stored run, and the secret run (refused there)
    assert batched == [["run-a", "run-b", "run-c", "run-new", "run-s"]]
    for r in runs:  # the same requests, one group each: each stored alone
        for job in rest(f"alone-{r}"):
            writer.store_group([job])
    replies = [(j.run_id, _error(j.future) or j.future.result()) for j in group]
    for _, reply in replies[:6]:
        assert not isinstance(reply, BaseException), reply
    assert [(r.accepted, r.duplicates) for _, r in replies[:6]] == [(2, 0), (0, 2)] * 3
    new = replies[6][1]
    assert not isinstance(new, BaseException) and new.accepted == 2
    hidden = replies[7][1]
    assert isinstance(hidden, RequestError) and hidden.status == 404
    with Session(engine) as session:
        for r in runs:
            assert _run_columns(session, r) == _run_columns(session, f"alone-{r}")
            assert _frames(session, r) == _frames(session, f"alone-{r}") == 4
            mine = [b[1:] for b in _blobs(session, r)]
            assert mine and mine == [b[1:] for b in _blobs(session, f"alone-{r}")]
        assert _frames(session, "run-s") == 2  # nothing of the refused request
    writer.stop()
    engine.dispose()


def test_a_batch_that_fails_is_rolled_back_and_its_jobs_stored_alone(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should ``store_batch`` raise halfway (after some of its statements ran), its
    savepoint is rolled back and every one of its requests is stored alone: nothing is
    lost or stored twice."""
    from gradwatch_server.ingest import batch_writer

    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine)
    runs = [f"run-{i}" for i in range(3)]
    bodies = {r: simple_run(r) for r in runs}
    writer.store_group([_batch_job(r, b"".join(f[:2])) for r, f in bodies.items()])
    real = batch_writer.store_batch

    def broken(session: Session, items: list[Any]) -> Any:
        real(session, items)
        raise RuntimeError("injected")

    monkeypatch.setattr(batch_writer, "store_batch", broken)
    group = [_batch_job(r, b"".join(f[2:4])) for r, f in bodies.items()]
    writer.store_group(group)
    assert [(j.future.result().accepted, j.future.result().duplicates) for j in group] == [
        (2, 0)
    ] * 3
    with Session(engine) as session:
        assert [_frames(session, r) for r in runs] == [4, 4, 4]
        assert all(_run_columns(session, r)[2] == 4 for r in runs)
    writer.stop()
    engine.dispose()
