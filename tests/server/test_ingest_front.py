"""``IngestFront`` answers ``POST /api/v1/ingest`` before FastAPI's stack: the same replies
as the FastAPI route behind the body limit (which a request with a query string still
reaches), the body's time limit, and the access log without answered ingest lines."""

from __future__ import annotations

import logging
import socket
from typing import Any

from fastapi.testclient import TestClient

from gradwatch_server.app import _SkipStoredIngest, create_app, quiet_ingest_access_log
from gradwatch_server.cli_actions import new_token
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL, live_server


def _cases(run: str, token: str) -> list[tuple[str, dict[str, str], Any]]:
    good = b"".join(f.simple_run(run, n=4))
    auth = {"Authorization": f"Bearer {token}"}
    return [
        ("stored", f.headers(run) | auth, good),
        ("duplicates", f.headers(run) | auth, good),
        ("no token", f.headers(run), good),
        ("bad token", f.headers(run) | {"Authorization": "Bearer nope"}, good),
        ("bad run id", f.headers("-bad") | auth, good),
        ("no run id", {"X-Gradwatch-Schema": "1"} | auth, good),
        ("other schema", f.headers(run, **{"X-Gradwatch-Schema": "9"}) | auth, good),
        ("content type", f.headers(run, **{"Content-Type": "text/plain"}) | auth, good),
        ("damaged", f.headers(run) | auth, good[:-3]),
        ("empty", f.headers(run) | auth, b""),
        ("over the limit", f.headers(run) | auth, good + b"x" * 5000),
        ("chunked over", f.headers(run) | auth, iter([good, b"x" * 5000])),
    ]


def test_the_front_answers_as_the_route(settings: Settings) -> None:
    secured = settings.with_(require_tokens=True, max_body_bytes=4000)
    token = new_token(secured, "default", "write")
    seen: dict[str, dict[str, Any]] = {"front": {}, "route": {}}
    with TestClient(create_app(secured), base_url=LOCAL) as client:
        for via, suffix in (("front", ""), ("route", "?via=route")):
            run = f"r-{via}"
            for name, headers, body in _cases(run, token):
                reply = client.post(f"/api/v1/ingest{suffix}", content=body, headers=headers)
                text = reply.text.replace(run, "RUN")
                seen[via][name] = (reply.status_code, text, reply.headers["content-type"])
    front = seen["front"]
    assert front == seen["route"]
    assert front["stored"][0] == 200 and '"accepted":0' in front["duplicates"][1]
    statuses = [front[n][0] for n in ("no token", "bad run id", "content type", "damaged")]
    assert statuses == [401, 400, 415, 400]
    assert front["over the limit"][0] == front["chunked over"][0] == 413


def test_the_front_sends_what_the_json_response_sends(client: TestClient) -> None:
    body = b"".join(f.simple_run("r1", n=2))
    front = client.post("/api/v1/ingest", content=body, headers=f.headers("r1"))
    route = client.post("/api/v1/ingest?x=1", content=body, headers=f.headers("r1"))
    assert front.status_code == route.status_code == 200
    assert list(front.headers.items()) == list(route.headers.items())
    count = front.json()["accepted"]
    assert front.json() == {"run": "r1", "accepted": count, "duplicates": 0} and count > 1
    assert route.json() == {"run": "r1", "accepted": 0, "duplicates": count}


def test_an_ingest_body_that_does_not_arrive_in_time_is_408(settings: Settings) -> None:
    with live_server(settings.with_(body_timeout=1.0)) as base:
        host, port = base.removeprefix("http://").split(":")
        conn = socket.create_connection((host, int(port)))
        conn.sendall(
            f"POST /api/v1/ingest HTTP/1.1\r\nHost: {host}\r\nX-Gradwatch-Run: r1\r\n"
            "X-Gradwatch-Schema: 1\r\nContent-Length: 1000\r\n\r\nGW".encode()
        )
        conn.settimeout(30)
        try:
            reply = conn.recv(4096)
        finally:
            conn.close()
        assert reply.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in reply


def _line(method: str, path: str, status: int) -> logging.LogRecord:
    args = ("127.0.0.1:5000", method, path, "1.1", status)
    return logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d', args, None
    )


def test_answered_ingest_requests_are_not_access_logged() -> None:
    keep = _SkipStoredIngest()
    assert not keep.filter(_line("POST", "/api/v1/ingest", 200))
    assert keep.filter(_line("POST", "/api/v1/ingest", 400))
    assert keep.filter(_line("POST", "/api/v1/ingest", 503))
    assert keep.filter(_line("POST", "/api/v1/ingest?x=1", 200))
    assert keep.filter(_line("GET", "/api/v1/runs", 200))
    quiet_ingest_access_log()
    quiet_ingest_access_log()
    access = logging.getLogger("uvicorn.access")
    assert sum(isinstance(x, _SkipStoredIngest) for x in access.filters) == 1
