"""The dashboard bridge's bounded pool (issue 19 item 4): a request that finds every
worker busy is answered 503 after the wait, instead of hanging; the pool recovers."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import flask
import uvicorn

from gradwatch_dashboard.bridge import Bounded, bridge
from tests.server.live import wait_for


@contextmanager
def serving(app: Bounded) -> Iterator[str]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), "uvicorn to start")
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_a_busy_bridge_answers_503_then_recovers() -> None:
    app = flask.Flask("busy")
    entered, release = threading.Event(), threading.Event()

    @app.route("/slow")
    def slow() -> str:
        entered.set()
        release.wait(30)
        return "done"

    @app.route("/fast")
    def fast() -> str:
        return "fast"

    with serving(bridge(app, slots=1, wait=0.5)) as base:
        first: list[int] = []
        holder = threading.Thread(target=lambda: first.append(status(f"{base}/slow")))
        holder.start()
        assert entered.wait(30)
        assert status(f"{base}/fast") == 503  # the only worker is busy
        release.set()
        holder.join(30)
        assert first == [200]
        assert status(f"{base}/fast") == 200
