"""Server fixtures: every test that takes ``db_url`` runs on SQLite and on PostgreSQL.

PostgreSQL is the machine's real server (``$GRADWATCH_TEST_PG``, default
``postgresql://postgres@127.0.0.1:5432/postgres``). The session creates a fresh database
``gradwatch_test_<random>``, migrates it once, empties its tables before each test and
drops it at the end. If PostgreSQL is unreachable these tests fail (they never skip): CI
starts PostgreSQL before running them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.engine import make_url

from gradwatch_server.app import create_app
from gradwatch_server.db import make_engine
from gradwatch_server.migrate import migrate
from gradwatch_server.settings import Settings
from tests.server.live import LOCAL

PG_ADMIN = os.environ.get("GRADWATCH_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
TABLES = (
    "alert_deliveries, alerts, alert_rules, drift_states, group_baselines, "
    "series_blobs, series_chunks, findings, fingerprints, events, ingested_frames, run_tags, "
    "spool_imports, tokens, runs, projects"
)


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.fail(
            f"PostgreSQL at {PG_ADMIN} is unreachable ({e}); start it (CI does) or set "
            "GRADWATCH_TEST_PG to a reachable server's admin URL"
        )


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated once."""
    name = f"gradwatch_test_{uuid.uuid4().hex[:12]}"
    with _admin() as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    migrate(engine)
    engine.dispose()
    yield url
    with _admin() as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _empty(url: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {TABLES}"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL with an empty, migrated schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gradwatch.db'}"
    url: str = request.getfixturevalue("pg_url")
    _empty(url)
    return url


@pytest.fixture
def settings(db_url: str, data_dir: Path) -> Settings:
    """Settings for a test app: the test's data directory, no background import, no
    background drift/alert monitor (tests that want it turn it on)."""
    return Settings(db_url=db_url, data_dir=data_dir, import_interval=None, monitor_interval=None)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """The real app through ``TestClient`` (lifespan entered)."""
    with TestClient(create_app(settings), base_url=LOCAL) as c:
        yield c
