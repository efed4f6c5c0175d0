"""A real uvicorn server on 127.0.0.1 (random port) in a thread, for end-to-end tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from gradwatch.server.app import create_app
from gradwatch.server.settings import Settings


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
