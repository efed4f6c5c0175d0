"""A real uvicorn server on 127.0.0.1 (random port) in a thread, for end-to-end tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from sqlalchemy import Engine

from gradwatch_server.app import create_app
from gradwatch_server.db import make_engine
from gradwatch_server.ingest.spool_import import import_run
from gradwatch_server.migrate import migrate
from gradwatch_server.settings import Settings

#: base URL for TestClient: a loopback Host header, which the server's Host check serves
LOCAL = "http://127.0.0.1"


@contextmanager
def live_server(settings: Settings) -> Iterator[str]:
    """Serve ``create_app(settings)`` until the block ends; yields the base URL."""
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), "uvicorn to start")
    assert server.started, "uvicorn did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def wait_for(condition: Callable[[], object], what: str, limit: float = 60.0) -> None:
    """Poll ``condition`` until true; fail after ``limit`` s (a hang guard, not a timing test)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {limit} s")
        time.sleep(0.05)


def sqlite_with(path: Path, *runs: Path) -> tuple[str, Engine]:
    """A migrated SQLite database at ``path`` holding the recorded ``runs`` (run folders,
    imported from their spools): its URL and an engine on it (the caller disposes it)."""
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    migrate(engine)
    for run in runs:
        import_run(engine, run)
    return url, engine
