"""The ingest prepare helper: the same rows and refusals as preparing on a thread, and a
writer that goes on when the helper is missing or dies."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from sqlmodel import Session

from gradwatch.core.wire import Kind, Record, encode_frame
from gradwatch_server.api.routes.ingest import request_job
from gradwatch_server.auth import OPEN
from gradwatch_server.db import make_engine
from gradwatch_server.exceptions import RequestError, ServerConfigError
from gradwatch_server.ingest.batch_writer import IngestWriter
from gradwatch_server.ingest.prepare_helper import (
    HelperUnavailableError,
    PrepareHelper,
    prepare_body,
)
from gradwatch_server.migrate import migrate
from gradwatch_server.models import Run
from gradwatch_server.settings import Settings
from tests.server.frames import simple_run
from tests.server.live import LOCAL


def _ready(helper: PrepareHelper, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not helper.is_ready():
        assert not helper.dead and time.monotonic() < deadline, "the helper did not start"
        time.sleep(0.02)


def _refusal(run: str, body: bytes, prepare: object) -> tuple[int, str]:
    with pytest.raises(RequestError) as e:
        prepare(run, body)  # type: ignore[operator]
    return e.value.status, e.value.message


def test_the_helper_prepares_what_the_thread_would_and_refuses_alike() -> None:
    helper = PrepareHelper.start()
    try:
        _ready(helper)
        body = b"".join(simple_run("run-a"))
        assert helper.prepare("run-a", body) == prepare_body("run-a", body)
        nan_steps = encode_frame(
            7, Record(Kind.HEARTBEAT, {"t": float("nan"), "steps": [3]})
        )  # 422: a non-finite time
        for bad in (b"GW\x01garbage", body[:-3], nan_steps, b""):
            assert _refusal("run-a", bad, helper.prepare) == _refusal("run-a", bad, prepare_body)
        assert helper.prepared >= 1
    finally:
        helper.stop()
    assert helper.proc.returncode == 0  # it ended on its stdin's EOF


def test_a_helper_that_died_is_unavailable_not_an_error_of_the_request() -> None:
    helper = PrepareHelper.start()
    _ready(helper)
    os.kill(helper.proc.pid, signal.SIGKILL)
    helper.proc.wait(30)
    with pytest.raises(HelperUnavailableError):
        helper.prepare("run-a", b"".join(simple_run("run-a")))
    assert helper.dead
    helper.stop()


def test_the_writer_prepares_in_its_helper_and_goes_on_without_it(db_url: str) -> None:
    """Policy ``on``: jobs are prepared in the helper; once the helper is killed the next
    job is prepared on the thread (answered, not failed) and no new helper is started
    for ``HELPER_RESTART_S``."""
    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine, helper="on")
    writer.start_helper()
    helper = writer._helper
    assert helper is not None
    _ready(helper)
    first = request_job("run-a", b"".join(simple_run("run-a")), OPEN)
    assert writer.submit(first).result(timeout=60).accepted == 5
    assert helper.prepared == 1
    many = [request_job(f"run-m{i}", b"".join(simple_run(f"run-m{i}")), OPEN) for i in range(20)]
    futures = [writer.submit(job) for job in many]  # several in flight in the helper
    assert [f.result(timeout=60).accepted for f in futures] == [5] * 20
    assert helper.prepared == 21
    os.kill(helper.proc.pid, signal.SIGKILL)
    helper.proc.wait(30)
    second = request_job("run-b", b"".join(simple_run("run-b")), OPEN)
    assert writer.submit(second).result(timeout=60).accepted == 5
    deadline = time.monotonic() + 30
    while not helper.dead and time.monotonic() < deadline:  # its reader saw the end
        time.sleep(0.01)
    bad = request_job("run-c", b"GW\x01garbage", OPEN)
    assert isinstance(writer.submit(bad).exception(timeout=60), RequestError)
    assert writer._helper is None and writer.helper_starts == 1
    with Session(engine) as session:
        assert session.get(Run, "run-a") is not None and session.get(Run, "run-b") is not None
    writer.stop()
    engine.dispose()


def test_policy_off_never_starts_a_helper_and_bad_policies_are_refused(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine)
    writer = IngestWriter(engine, helper="off")
    writer.start_helper()
    jobs = [
        writer.submit(request_job(f"run-{i}", b"".join(simple_run(f"run-{i}")), OPEN))
        for i in range(8)
    ]
    assert [f.result(timeout=60).accepted for f in jobs] == [5] * 8
    assert writer.helper_starts == 0
    writer.stop()
    engine.dispose()
    with pytest.raises(ValueError, match="helper must be one of"):
        IngestWriter(engine, helper="always")
    with pytest.raises(ServerConfigError, match="GRADWATCH_PREPARE_HELPER"):
        Settings.from_env(db="sqlite://", data_dir="/tmp", prepare_helper="sometimes")


def test_a_server_with_a_helper_takes_requests_only_once_it_is_ready(tmp_path: Path) -> None:
    """The first burst of requests (every run's first at once) is not prepared on the
    server's own thread while the helper imports."""
    from fastapi.testclient import TestClient

    from gradwatch_server.app import create_app

    settings = Settings(
        db_url=f"sqlite:///{tmp_path}/gw.db",
        data_dir=tmp_path,
        import_interval=None,
        monitor_interval=None,
        prepare_helper="on",
    )
    app = create_app(settings)
    with TestClient(app, base_url=LOCAL) as client:
        writer = app.state.ingest_writer
        assert writer._helper is not None and writer._helper.ready  # before any request
        reply = client.post(
            "/api/v1/ingest",
            content=b"".join(simple_run("run-1")),
            headers={"X-Gradwatch-Run": "run-1", "X-Gradwatch-Schema": "1"},
        )
        assert reply.status_code == 200, reply.text
        assert writer._helper.prepared == 1  # the helper prepared it, not the thread
