"""The app's surface: docs, spec, health, error shape and the non-finite JSON encoding."""

from __future__ import annotations

import json
import math
from typing import Any

import fastapi.routing
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from gradwatch.core.nonfinite import decode_float, encode_floats
from gradwatch_server.app import API_PREFIX
from gradwatch_server.jsonresp import dumps

NO_BODY = {("DELETE", "/api/v1/alert-rules/{rule_id}")}
"""API routes that answer without a JSON body (204), so with no response model."""


def test_every_api_route_declares_its_response_model(client: TestClient) -> None:
    app: Any = client.app
    contexts = list(fastapi.routing.iter_route_contexts(app.routes))  # routers flattened
    api = {}
    for ctx in contexts:
        route = getattr(ctx, "original_route", ctx)
        if isinstance(route, APIRoute) and str(ctx.path).startswith(API_PREFIX):
            api.update({(m, str(ctx.path)): route for m in ctx.methods})
    assert len(api) >= 20, sorted(api)  # the walk reaches the routers' routes
    missing = sorted(k for k, r in api.items() if r.response_model is None and k not in NO_BODY)
    assert missing == [], f"API routes without response_model: {missing}"
    for key in NO_BODY:
        assert api[key].status_code == 204 and api[key].response_model is None
    # the catch-all for unknown /api/... paths is the server's, after every API route
    routes = [getattr(c, "original_route", c) for c in contexts]
    last = [r for r in routes if isinstance(r, APIRoute)][-1]
    assert last.path == "/api/{rest:path}" and not last.include_in_schema


def test_docs_and_spec_are_served(client: TestClient) -> None:
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert set(spec["paths"]) == {
        "/api/v1/ingest",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/runs/{run_id}/findings",
        "/api/v1/runs/{run_id}/incidents",
        "/api/v1/runs/{run_id}/scalars",
        "/api/v1/runs/{run_id}/series",
        "/api/v1/runs/{run_id}/overview",
        "/api/v1/runs/{run_id}/lifecycle",
        "/api/v1/runs/{run_id}/structure",
        "/api/v1/health",
        "/api/v1/compare",
        "/api/v1/groups",
        "/api/v1/groups/{key}",
        "/api/v1/groups/{key}/baseline",
        "/api/v1/groups/{key}/envelope",
        "/api/v1/groups/{key}/structure",
        "/api/v1/alerts",
        "/api/v1/alert-rules",
        "/api/v1/alert-rules/{rule_id}",
        "/api/v1/alert-deliveries",
    }
    body = spec["paths"]["/api/v1/ingest"]["post"]["requestBody"]["content"]
    assert "application/vnd.gradwatch.frames" in body


def test_health(client: TestClient) -> None:
    assert client.get("/api/v1/health").json()["schema"] == 1


def test_bad_query_parameters_are_422_with_a_sentence(client: TestClient) -> None:
    reply = client.get("/api/v1/runs", params={"limit": 0})
    assert reply.status_code == 422
    assert reply.json()["detail"].startswith("invalid request: query.limit")


def test_nonfinite_floats_are_encoded_as_strings_and_back() -> None:
    content = {"v": [1.5, math.nan, math.inf, -math.inf, -0.0, 5e-324], "s": "NaN"}
    text = json.loads(dumps(content))
    assert text["v"][1:4] == ["NaN", "Infinity", "-Infinity"]
    back = [decode_float(v) for v in text["v"]]
    assert math.isnan(back[1]) and back[2:] == [math.inf, -math.inf, -0.0, 5e-324]
    assert math.copysign(1.0, back[4]) == -1.0
    assert encode_floats({"a": (1.0,)}) == {"a": [1.0]}
    assert json.loads(dumps({"x": "\udc80"}))["x"] == "\udc80"


def test_dashboard_is_served_beside_the_api_and_api_paths_stay_json(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "<title>gradwatch</title>" in page.text
    assert client.get("/runs/anything").status_code == 200  # a page; the app routes it
    missing = client.get("/api/v1/no-such-route")
    assert missing.status_code == 404
    assert missing.json()["detail"].startswith("no API route /api/v1/no-such-route")
