"""Database plumbing: URLs, migrations matching the models, SQLite under concurrent writers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlmodel import SQLModel

from gradwatch.server.app import create_app
from gradwatch.server.db import make_engine, normalize_url
from gradwatch.server.errors import ServerConfigError
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
