"""Database plumbing: URLs, migrations matching the models, SQLite under concurrent writers."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlmodel import SQLModel

from gradwatch.server.app import create_app
from gradwatch.server.db import PAGE_SIZE, make_engine, normalize_url
from gradwatch.server.exceptions import ServerConfigError
from gradwatch.server.migrate import migrate
from gradwatch.server.settings import Settings
from tests.server import frames as f


def test_postgres_urls_use_psycopg3_and_other_databases_are_refused() -> None:
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgresql://u:p@h:5/db") == "postgresql+psycopg://u:p@h:5/db"
    with pytest.raises(ServerConfigError, match="unsupported database 'mysql'"):
        normalize_url("mysql://u@h/db")
    with pytest.raises(ServerConfigError, match="cannot parse"):
        normalize_url("not a url")


def test_migrations_create_exactly_the_models_tables(db_url: str) -> None:
    engine = make_engine(db_url)
    migrate(engine)
    migrate(engine)  # a second start finds nothing to do
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    engine.dispose()
    assert diff == []


def test_sqlite_in_wal_mode_takes_concurrent_writers_without_lock_errors(
    tmp_path: Path, data_dir: Path
) -> None:
    settings = Settings(f"sqlite:///{tmp_path / 'shared.db'}", data_dir, import_interval=None)
    engine = make_engine(settings.db_url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()
    statuses: list[int] = []
    apps = [create_app(settings) for _ in range(2)]  # two engines: two independent writers

    def send(app_index: int, worker: int) -> None:
        with TestClient(apps[app_index]) as client:
            for k in range(6):
                run = f"w{worker}-{k}"
                body = b"".join(f.simple_run(run, n=20, tensors=20))
                statuses.append(
                    client.post("/api/v1/ingest", content=body, headers=f.headers(run)).status_code
                )

    threads = [threading.Thread(target=send, args=(i % 2, i)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 36


def _page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def _store_and_read(settings: Settings, run: str) -> dict[str, object]:
    with TestClient(create_app(settings)) as client:
        body = b"".join(f.simple_run(run, n=20, tensors=3))
        posted = client.post("/api/v1/ingest", content=body, headers=f.headers(run))
        assert posted.status_code == 200
        reply = client.get(f"/api/v1/runs/{run}/series", params={"tensor": "t1", "points": 100})
        detail: dict[str, object] = client.get(f"/api/v1/runs/{run}").json()
        detail["series_steps"] = reply.json()["data"][0]["steps"]
        return detail


def test_a_new_sqlite_file_gets_large_pages_and_an_old_one_keeps_its_own(
    tmp_path: Path, data_dir: Path
) -> None:
    new = tmp_path / "new.db"
    _store_and_read(Settings(f"sqlite:///{new}", data_dir, import_interval=None), "r-new")
    assert _page_size(new) == PAGE_SIZE == 32768

    old = tmp_path / "old.db"  # a database made by an earlier version: SQLite's 4 KiB pages
    with closing(sqlite3.connect(old)) as conn:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE made_before (x)")
    settings = Settings(f"sqlite:///{old}", data_dir, import_interval=None)
    before = _store_and_read(settings, "r-old")
    assert (before["steps"], before["series_steps"]) == (20, list(range(1, 21)))
    assert _page_size(old) == 4096  # opening it changed nothing

    # the conversion docs/server.md gives (server stopped): same data, 32 KiB pages, WAL
    with closing(sqlite3.connect(old, isolation_level=None)) as conn:
        for sql in (
            "PRAGMA journal_mode=DELETE",
            "PRAGMA page_size=32768",
            "VACUUM",
            "PRAGMA journal_mode=WAL",
        ):
            conn.execute(sql)
    assert _page_size(old) == 32768
    with TestClient(create_app(settings)) as client:
        after = client.get("/api/v1/runs/r-old").json()
        steps = client.get("/api/v1/runs/r-old/series", params={"tensor": "t1", "points": 100})
    assert {k: after[k] for k in ("steps", "frames", "status")} == {
        k: before[k] for k in ("steps", "frames", "status")
    }
    assert steps.json()["data"][0]["steps"] == before["series_steps"]
