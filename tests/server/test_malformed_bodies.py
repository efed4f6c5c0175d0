"""Malformed request bodies on every route: nested, truncated, wrong-typed and oversized
bodies to every operation of the OpenAPI schema and to the dashboard's callback route,
on a real server on loopback, get a 4xx JSON error (routes that read no body may answer
2xx, never 5xx); the dashboard's own callback requests still pass
(``gradwatch_dashboard.callback_guard``)."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from gradwatch_dashboard.callback_guard import MAX_DEPTH, BadCallbackError, check_callback
from gradwatch_server.settings import Settings
from tests.server.guards.test_hostcheck import ROUTER_CALL, router_call
from tests.server.live import live_server

JSON_LIMIT = 1 << 20
INGEST_LIMIT = 2 << 20
BODIES = {
    "nested": b"[" * 400_000,
    "nested-object": b'{"a":' * 150_000,
    "truncated": b'{"output": "..page.children...routed.data..", "inputs": [{"id": "url"',
    "wrong-typed": b'[1, "two", null]',
    "wrong-typed-fields": b'{"output": 5, "outputs": "x", "inputs": 7, "name": [], "url": {}}',
    "not-utf8": b"\xff\xfe\x00{",
}
DASH_ROUTE = "/_dash-update-component"


def _send(base: str, method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
    where = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
    try:
        # an oversized body is refused before it is all sent; the reply is there
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.request(method, path, body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.getheader("Content-Type", ""), reply.read()
    finally:
        conn.close()


def _operations(base: str) -> list[tuple[str, str, bool]]:
    """(method, path with parameters filled in, whether it reads a body) of every operation."""
    status, _, raw = _send(base, "GET", "/openapi.json", b"")
    assert status == 200
    spec: dict[str, Any] = json.loads(raw)
    out = []
    for path, operations in spec["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "1", path)
        for method, operation in operations.items():
            reads = "requestBody" in operation or path.endswith("/ingest")
            out.append((method.upper(), concrete, reads))
    return out


@pytest.fixture
def server(db_url: str, data_dir: Path) -> Settings:
    return Settings(
        db_url=db_url,
        data_dir=data_dir,
        import_interval=None,
        monitor_interval=None,
        max_json_bytes=JSON_LIMIT,
        max_body_bytes=INGEST_LIMIT,
    )


@pytest.mark.slow
def test_every_route_answers_malformed_bodies_with_a_4xx_json_error(server: Settings) -> None:
    with live_server(server) as base:
        operations = _operations(base)
        assert len(operations) > 20 and any(reads for *_, reads in operations)
        operations.append(("POST", DASH_ROUTE, True))
        for method, path, reads in operations:
            limit = INGEST_LIMIT if path.endswith("/ingest") else JSON_LIMIT
            bodies = {**BODIES, "oversized": b"[" + b"1," * (limit // 2) + b"1]"}
            for kind, body in bodies.items():
                status, content_type, raw = _send(base, method, path, body)
                what = (method, path, kind, status, raw[:200])
                assert status < 500, what
                assert content_type.startswith("application/json"), what
                if reads or kind == "oversized":
                    assert 400 <= status < 500, what
                    assert json.loads(raw)["detail"], what
                if kind == "oversized":
                    assert status == 413, what
        # the server is still whole, and the dashboard's own callback still runs
        assert _send(base, "GET", "/api/v1/health", b"")[0] == 200
        assert router_call(base)[0] == 200


RULE_CALL = {
    "output": "rule-message.children",
    "outputs": {"id": "rule-message", "property": "children"},
    "inputs": [
        {"id": "rule-add", "property": "n_clicks", "value": None},
        [{"id": {"id": 7, "type": "rule-delete"}, "property": "n_clicks", "value": None}],
    ],
    "state": [
        {"id": "rule-project", "property": "value", "value": None},
        {"id": "rule-check", "property": "value", "value": None},
        {"id": "rule-severity", "property": "value", "value": None},
        {"id": "rule-webhook", "property": "value", "value": None},
    ],
    "changedPropIds": [],
}


def _with_value(call: dict[str, Any], index: int, value: Any) -> dict[str, Any]:
    inputs = list(call["inputs"])
    inputs[index] = {**inputs[index], "value": value}
    return {**call, "inputs": inputs}


def test_the_callback_check_names_what_is_wrong() -> None:
    from gradwatch_dashboard.dash_app import create_dash

    callbacks = create_dash().callback_map
    check_callback(json.dumps(ROUTER_CALL).encode(), callbacks)  # the pages' own requests
    check_callback(json.dumps(RULE_CALL).encode(), callbacks)  # a pattern-matching input
    deep: Any = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    wrong = {
        json.dumps({**ROUTER_CALL, "inputs": [deep]}): "nested deeper",
        json.dumps({**ROUTER_CALL, "output": "nope.children"}): "no callback",
        json.dumps({**ROUTER_CALL, "inputs": ROUTER_CALL["inputs"][:1]}): "list of 2",
        json.dumps({**ROUTER_CALL, "outputs": {"id": "page"}}): "list of 2 objects",
        json.dumps({**ROUTER_CALL, "state": [{"id": "x", "property": "data"}]}): "routed.data",
        json.dumps({**RULE_CALL, "inputs": [RULE_CALL["inputs"][0], {"id": "x"}]}): "matches",
        json.dumps({**ROUTER_CALL, "changedPropIds": [1]}): "changedPropIds",
        json.dumps(_with_value(ROUTER_CALL, 0, {"a": 1})): "'pathname' takes str | None",
        json.dumps(_with_value(RULE_CALL, 0, True)): "'_add' takes int | None",
        json.dumps({**RULE_CALL, "outputs": []}): "'outputs' must be an object",
        json.dumps({**ROUTER_CALL, "output": "cmp-address.data"}): "runs in the browser",
        "[]": "JSON array",
        "{": "not JSON",
    }
    for body, why in wrong.items():
        with pytest.raises(BadCallbackError, match=why):
            check_callback(body.encode(), callbacks)


WRONG_VALUES: tuple[Any, ...] = (
    12345,
    -1.5,
    True,
    {"run": [1]},
    [1, "x", None],
    "x" * 5000,
    [[[]]],
)


def _wrong_typed_calls(callbacks: dict[str, Any]) -> list[tuple[str, bytes]]:
    """For every server-side callback, well-formed requests (its ids, properties and
    outputs) in which one value at a time is of a type its page never sends."""
    calls = []
    for output, callback in callbacks.items():
        if callback.get("callback") is None:
            continue
        names = output.strip(".").split("...")
        outputs: Any = [dict(zip(("id", "property"), n.split("."), strict=True)) for n in names]
        specs = [*callback["inputs"], *callback["state"]]
        for index, spec in enumerate(specs):
            if str(spec["id"]).startswith("{"):
                continue
            for value in WRONG_VALUES:
                items: list[Any] = [
                    [] if str(s["id"]).startswith("{") else {**s, "value": None} for s in specs
                ]
                items[index] = {**spec, "value": value}
                split = len(callback["inputs"])
                request = {
                    "output": output,
                    "outputs": outputs if output.startswith("..") else outputs[0],
                    "inputs": items[:split],
                    "state": items[split:],
                    "changedPropIds": [],
                }
                calls.append((f"{output} #{index} {value!r:.20}", json.dumps(request).encode()))
    return calls


@pytest.mark.slow
def test_every_dashboard_callback_answers_wrong_typed_values_with_a_4xx(server: Settings) -> None:
    from gradwatch_dashboard.dash_app import create_dash

    calls = _wrong_typed_calls(create_dash().callback_map)
    assert len(calls) > 50
    with live_server(server) as base:
        for what, body in calls:
            status, content_type, raw = _send(base, "POST", DASH_ROUTE, body)
            assert status < 500, (what, raw[:300])
            assert content_type.startswith("application/json"), what
        assert router_call(base)[0] == 200
