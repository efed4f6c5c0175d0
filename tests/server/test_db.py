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

from gradwatch.cli import main
from gradwatch_server.app import create_app
from gradwatch_server.cli_actions import small_pages_hint
from gradwatch_server.db import PAGE_SIZE, convert_pages, make_engine, normalize_url
from gradwatch_server.exceptions import ServerConfigError
from gradwatch_server.migrate import migrate
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL


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
        with TestClient(apps[app_index], base_url=LOCAL) as client:
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
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        body = b"".join(f.simple_run(run, n=20, tensors=3))
        posted = client.post("/api/v1/ingest", content=body, headers=f.headers(run))
        assert posted.status_code == 200
        reply = client.get(f"/api/v1/runs/{run}/series", params={"tensor": "t1", "points": 100})
        detail: dict[str, object] = client.get(f"/api/v1/runs/{run}").json()
        detail["series_steps"] = reply.json()["data"][0]["steps"]
        return detail


def test_a_new_sqlite_file_gets_large_pages_and_an_old_one_is_converted_on_request(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "new.db"
    _store_and_read(Settings(f"sqlite:///{new}", data_dir, import_interval=None), "r-new")
    assert _page_size(new) == PAGE_SIZE == 32768
    assert small_pages_hint(Settings(f"sqlite:///{new}", data_dir)) is None

    old = tmp_path / "old.db"  # a database made by an earlier version: SQLite's 4 KiB pages
    with closing(sqlite3.connect(old)) as conn:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE made_before (x)")
    settings = Settings(f"sqlite:///{old}", data_dir, import_interval=None)
    before = _store_and_read(settings, "r-old")
    assert (before["steps"], before["series_steps"]) == (20, list(range(1, 21)))
    assert _page_size(old) == 4096  # opening it changed nothing
    assert small_pages_hint(settings) == (
        "this database has 4 KiB pages (made by an earlier gradwatch), which hold fewer live "
        "runs than 32 KiB ones; to convert it, stop the server and run `gradwatch serve "
        "--convert-pages` with the same --db"
    )

    assert main(["serve", "--db", f"sqlite:///{old}", "--convert-pages"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"converted {old} from 4 KiB to 32 KiB pages in ")
    assert _page_size(old) == 32768
    with closing(sqlite3.connect(old)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert small_pages_hint(settings) is None
    with TestClient(create_app(settings), base_url=LOCAL) as client:
        after = client.get("/api/v1/runs/r-old").json()
        steps = client.get("/api/v1/runs/r-old/series", params={"tensor": "t1", "points": 100})
    assert {k: after[k] for k in ("steps", "frames", "status")} == {
        k: before[k] for k in ("steps", "frames", "status")
    }
    assert steps.json()["data"][0]["steps"] == before["series_steps"]

    assert main(["serve", "--db", f"sqlite:///{old}", "--convert-pages"]) == 0
    assert capsys.readouterr().out == f"{old} has 32 KiB pages already\n"


def test_convert_pages_refuses_a_database_in_use_and_what_is_not_a_sqlite_file(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = tmp_path / "busy.db"
    with closing(sqlite3.connect(busy, isolation_level=None)) as server:  # a server's connection
        server.execute("PRAGMA page_size=4096")
        server.execute("PRAGMA journal_mode=WAL")
        server.execute("CREATE TABLE t (x)")
        server.execute("INSERT INTO t VALUES (1)")
        assert main(["serve", "--db", f"sqlite:///{busy}", "--convert-pages"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"gradwatch serve: {busy} is in use (database is locked): stop ")
        assert err.rstrip().endswith("then run this again; nothing was changed")
        assert _page_size(busy) == 4096
        assert server.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert server.execute("SELECT x FROM t").fetchall() == [(1,)]

    with pytest.raises(ServerConfigError, match="PostgreSQL sizes its own pages"):
        convert_pages("postgresql://u@127.0.0.1:1/none")
    with pytest.raises(ServerConfigError, match=r"no database at .*: nothing to convert"):
        convert_pages(f"sqlite:///{tmp_path / 'missing.db'}")
    text = tmp_path / "notes.db"
    text.write_text("not a database, but long enough to have a header\n")
    with pytest.raises(ServerConfigError, match="is not a SQLite database"):
        convert_pages(f"sqlite:///{text}")
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(ServerConfigError, match="is empty: the server gives it 32 KiB pages"):
        convert_pages(f"sqlite:///{empty}")
