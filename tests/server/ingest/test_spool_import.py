"""Runs spooled without a server appear when it starts; live runs keep streaming after."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from sqlmodel import Session

import gradwatch
from gradwatch.core import paths
from gradwatch.core.spool import SpoolWriter
from gradwatch_server.app import create_app
from gradwatch_server.db import make_engine
from gradwatch_server.ingest.spool_import import RECHECK_ENDED, SpoolImporter, import_run
from gradwatch_server.migrate import migrate
from gradwatch_server.models import Run
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL, wait_for
from tests.server.training import make, spooled, train


def listed(client: TestClient) -> list[dict[str, object]]:
    data: list[dict[str, object]] = client.get("/api/v1/runs").json()["data"]
    return data


def test_a_finished_run_appears_complete_when_the_server_starts(settings: Settings) -> None:
    model, opt = make()
    with gradwatch.watch(model, opt, project="offline") as run:
        train(run, model, opt, 12)
    frames, _ = spooled(run)
    with TestClient(create_app(settings.with_(import_interval=0.1)), base_url=LOCAL) as client:
        wait_for(lambda: listed(client) and listed(client)[0]["status"] == "finished", "import")
        got = listed(client)[0]
        assert (got["id"], got["steps"], got["frames"], got["project"]) == (
            run.id,
            12,
            frames,
            "offline",
        )


def test_a_run_started_before_the_server_finishes_streaming_after(settings: Settings) -> None:
    model, opt = make()
    run = gradwatch.watch(model, opt)
    train(run, model, opt, 5)
    run.flush()
    with TestClient(create_app(settings.with_(import_interval=0.1)), base_url=LOCAL) as client:
        wait_for(lambda: bool(listed(client)), "the live run to appear")
        assert listed(client)[0]["status"] == "running"
        train(run, model, opt, 7)
        run.close()
        frames, _ = spooled(run)
        wait_for(lambda: listed(client)[0]["status"] == "finished", "the END record")
        assert (listed(client)[0]["steps"], listed(client)[0]["frames"]) == (12, frames)


def test_import_uses_its_own_cursor_and_is_repeatable(settings: Settings, data_dir: Path) -> None:
    model, opt = make()
    with gradwatch.watch(model, opt) as run:
        train(run, model, opt, 4)
    frames, _ = spooled(run)
    engine = make_engine(settings.db_url)
    migrate(engine)
    try:
        assert import_run(engine, run.dir) == frames
        assert import_run(engine, run.dir) == 0
        assert SpoolImporter(engine, data_dir, 1.0).import_all() == 0
        assert not (run.dir / "acked").exists() or (run.dir / "acked").read_text() in ("", "0")
    finally:
        engine.dispose()


def _spool(data_dir: Path, run: str, *, ended: bool) -> Path:
    run_dir = paths.runs_dir(data_dir) / run
    writer = SpoolWriter(run_dir)
    writer.append(f.start(run))
    writer.append(f.steps(1, np.ones((3, 2, 4), "f4")))
    if ended:
        writer.append(f.end(steps_done=3))
    writer.close()
    return run_dir


def test_a_pass_looks_at_the_live_runs_and_a_few_ended_ones_only(
    settings: Settings, data_dir: Path
) -> None:
    engine = make_engine(settings.db_url)
    migrate(engine)
    try:
        ended = [_spool(data_dir, f"done-{i:02d}", ended=True) for i in range(3 * RECHECK_ENDED)]
        _spool(data_dir, "live", ended=False)
        importer = SpoolImporter(engine, data_dir, 1.0)
        assert importer.import_all() == 3 * 3 * RECHECK_ENDED + 2
        assert importer.last_checked == 3 * RECHECK_ENDED + 1
        assert importer.import_all() == 0
        assert importer.last_checked == 1 + RECHECK_ENDED  # not one per finished run
        late = SpoolWriter(ended[-1])  # frames after an END are still imported, in turn
        late.append(f.steps(4, np.ones((2, 2, 4), "f4")))
        late.close()
        assert sum(importer.import_all() for _ in range(3)) == 1
        with Session(engine) as session:
            assert session.get(Run, f"done-{3 * RECHECK_ENDED - 1:02d}") is not None
            assert session.get(Run, f"done-{3 * RECHECK_ENDED - 1:02d}").steps == 5  # type: ignore[union-attr]
    finally:
        engine.dispose()
