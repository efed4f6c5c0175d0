"""Dashboard fixtures: the five demo runs recorded by real training subprocesses, a real
server holding them (and an empty one), and one headless Chromium for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver

from gradwatch_dashboard.api_client import Api
from gradwatch_server.db import make_engine
from gradwatch_server.ingest.spool_import import SpoolImporter
from gradwatch_server.migrate import migrate
from gradwatch_server.settings import Settings
from tests.collector.demo_runs import record_demo
from tests.dashboard.browser import chromium
from tests.server.live import live_server

DEMO_STEPS = 90


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding the demo's five runs (``gradwatch demo --no-serve``)."""
    return record_demo(tmp_path_factory.mktemp("demo"), DEMO_STEPS, jobs=3)


def serve(db: Path, data_dir: Path) -> Iterator[str]:
    """A live server on ``db`` after importing ``data_dir``'s spools."""
    settings = Settings(db_url=f"sqlite:///{db}", data_dir=data_dir, import_interval=None)
    engine = make_engine(settings.db_url)
    migrate(engine)
    SpoolImporter(engine, data_dir, 0.0).import_all()
    engine.dispose()
    with live_server(settings) as url:
        yield url


@pytest.fixture(scope="session")
def demo_url(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a server holding the demo runs."""
    yield from serve(tmp_path_factory.mktemp("db") / "gradwatch.db", demo_dir)


@pytest.fixture(scope="session")
def demo_api(demo_url: str) -> Api:
    """The dashboard's API client for the demo server."""
    return Api(demo_url)


@pytest.fixture(scope="session")
def demo_ids(demo_api: Api) -> dict[str, str]:
    """Demo run name → run id."""
    return {r["name"]: r["id"] for r in demo_api.get("/runs")["data"]}


@pytest.fixture
def empty_url(tmp_path: Path) -> Iterator[str]:
    """A live server with no runs."""
    yield from serve(tmp_path / "gradwatch.db", tmp_path / "data")


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    """One headless Chromium for the session."""
    driver = chromium()
    yield driver
    driver.quit()
