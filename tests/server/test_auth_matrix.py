"""Auth matrix: every API route × {own, other project's, read-only, revoked, no token}.

Routes are enumerated from the app at test time, so a route added later is covered (and a
route without an access decision fails ``test_every_route_declares_an_access_decision``).
Project ``a`` holds a run whose id is a unique marker; no reply to project ``b``'s tokens
may contain it, and no write with a foreign, read-only, revoked or missing token changes
what is stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any

import fastapi
import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from gradwatch.core.wire import Kind, Record, encode_frame
from gradwatch_server.api.deps import (
    PUBLIC,
    AccessDep,
    ReadAccess,
    RouteInfo,
    app_routes,
    undecided_routes,
)
from gradwatch_server.app import create_app
from gradwatch_server.auth import Access
from gradwatch_server.cli_actions import new_token, revoke
from gradwatch_server.db import make_engine
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL

MARK = "run-of-a-7f3c2e"  # project a's run: must never appear in a reply to project b
OTHER = "run-of-b-91d0aa"
# Routes FastAPI adds for its own docs: public, serve no project data.
# the API documentation and its bundled assets (served offline): no data
DOC_ROUTES = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/static-offline-docs"}
# The dashboard's mount at "/" (listed with an empty path): its pages hold no data; they
# read it through the API above, with the caller's token.
DASHBOARD_MOUNT = ""
# the dashboard app's catch-all under /api: answers 404 for an unknown API path, holds no data
API_CATCH_ALL = "/api/{rest:path}"
WHO = ("own", "other", "read-only", "revoked", "none")


@dataclass
class Locked:
    client: TestClient
    app: FastAPI
    tokens: dict[str, str]
    settings: Settings

    @property
    def db_url(self) -> str:
        return self.settings.db_url


@pytest.fixture
def locked(settings: Settings) -> Iterator[Locked]:
    """A token-requiring app; tokens a/b × read/write, plus revoked ones of project a."""
    secured = settings.with_(require_tokens=True)
    tokens = {f"{p}-{s}": new_token(secured, p, s) for p in ("a", "b") for s in ("read", "write")}
    for scope in ("read", "write"):
        tokens[f"a-{scope}-revoked"] = secret = new_token(secured, "a", scope)
        revoke(secured, secret)
    app = create_app(secured)
    with TestClient(app, base_url=LOCAL) as client:
        for run, project in ((MARK, "a"), (OTHER, "b")):
            body = b"".join(f.simple_run(run, project=project))
            auth = bearer(tokens[f"{project}-write"])
            reply = client.post("/api/v1/ingest", content=body, headers={**f.headers(run), **auth})
            assert reply.status_code == 200, reply.text
        yield Locked(client, app, tokens, secured)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token_for(who: str, decision: str, tokens: dict[str, str]) -> str | None:
    """The token a caller of kind ``who`` holds for a route needing ``decision``."""
    scope = "write" if decision == "write" else "read"
    return {
        "own": tokens[f"a-{scope}"],
        "other": tokens[f"b-{scope}"],
        "read-only": tokens["a-read"],
        "revoked": tokens[f"a-{scope}-revoked"],
        "none": None,
    }[who]


def stored(db_url: str) -> tuple[int, int]:
    """(frames stored for project a's run, runs stored): what a write would change."""
    engine = make_engine(db_url)
    with engine.connect() as conn:
        frames = conn.execute(
            text("SELECT count(*) FROM ingested_frames WHERE run_id = :r"), {"r": MARK}
        ).scalar_one()
        runs = conn.execute(text("SELECT count(*) FROM runs")).scalar_one()
    engine.dispose()
    return int(frames), int(runs)


def request_for(route: RouteInfo, method: str) -> dict[str, Any]:
    """A request aimed at project a's data: path params filled, a body for writes."""
    path = re.sub(r"\{run_id\}", MARK, route.path)
    path = re.sub(r"\{[^}]+\}", "x", path)
    if route.path.endswith("/ingest"):
        # a new frame (seq 99) of project a's run: stored only for an own write token
        frame = encode_frame(99, Record(Kind.HEARTBEAT, {"t": 1.7e9, "steps": [10]}))
        return {"method": method, "url": path, "content": frame, "headers": f.headers(MARK)}
    if method in ("POST", "PUT", "PATCH"):
        return {"method": method, "url": path, "json": {}}
    return {"method": method, "url": path}


def test_every_route_declares_an_access_decision(locked: Locked) -> None:
    """Fails when a route is added without ReadAccess, WriteAccess or dependencies=PUBLIC."""
    assert undecided_routes(locked.app) == [], (
        "these routes take no access decision; add `access: ReadAccess` or "
        "`access: WriteAccess` to the handler, or `dependencies=PUBLIC` to the decorator "
        "(see gradwatch_server.api.deps)"
    )
    routes = app_routes(locked.app)
    others = {r.path for r in routes if not r.api}
    allowed = DOC_ROUTES | {DASHBOARD_MOUNT, API_CATCH_ALL}
    assert others <= allowed, f"non-API routes with no access decision: {others - allowed}"
    decided = {r.path: r.decision for r in routes if r.api}
    assert len(decided) >= 6, decided  # the walk really reaches the routers' routes
    assert decided["/api/v1/health"] == "public"
    assert decided["/api/v1/ingest"] == "write"
    assert decided["/api/v1/runs/{run_id}"] == "read"


def test_a_route_without_a_decision_is_caught() -> None:
    """The coverage check itself: an undeclared route (even one that authenticates) fails it."""
    app = FastAPI()
    router = fastapi.APIRouter()

    @router.get("/in-a-router")
    def in_a_router() -> None:
        return None

    app.include_router(router, prefix="/api")

    @app.get("/nothing")
    def nothing() -> dict[str, str]:
        return {}

    @app.get("/authenticates-only")
    def authenticates_only(access: AccessDep) -> dict[str, str]:
        return {}

    @app.get("/declared")
    def declared(access: ReadAccess) -> dict[str, str]:
        return {}

    @app.get("/open", dependencies=PUBLIC)
    def open_route() -> dict[str, str]:
        return {}

    @app.get("/both", dependencies=PUBLIC)
    def both(access: Annotated[Access, Depends(lambda: None)], more: ReadAccess) -> None:
        return None

    assert undecided_routes(app) == [
        "GET /api/in-a-router",
        "GET /authenticates-only",
        "GET /both",
        "GET /nothing",
    ]


def test_every_route_against_every_kind_of_caller(locked: Locked) -> None:
    client, tokens = locked.client, locked.tokens
    before = stored(locked.db_url)
    seen: list[str] = []
    for route in app_routes(locked.app):
        if not route.api:
            continue
        decision = route.decision
        assert decision is not None, route.path
        for method in sorted(route.methods):
            for who in WHO:
                token = token_for(who, decision, tokens)
                req = request_for(route, method)
                req["headers"] = {**req.get("headers", {}), **(bearer(token) if token else {})}
                reply = client.request(**req)
                code = reply.status_code
                seen.append(f"{method} {route.path} {who} {code}")
                where = f"{method} {route.path} as {who}: {code} {reply.text[:200]}"
                assert code < 500, where
                if decision == "public":
                    assert code == 200, where
                elif who in ("revoked", "none"):
                    assert code == 401, where
                elif who == "own" or (who == "read-only" and decision == "read"):
                    assert code not in (401, 403), where
                elif who == "other":
                    assert code in (403, 404) or MARK not in reply.text, where
                    assert not 200 <= code < 300 or decision == "read", where
                else:  # a read-only token on a write route
                    assert code == 403, where
                if who in ("other", "revoked", "none") and decision == "read":
                    # a 404 may echo the id the caller sent, nothing else of project a
                    echo = f"no run '{MARK}'" if code == 404 else ""
                    shown = reply.text.replace(echo, "") if echo else reply.text
                    assert MARK not in shown, f"cross-project read: {where}"
                if who == "own":
                    before = stored(locked.db_url)
                else:
                    assert stored(locked.db_url) == before, f"a refused write changed data: {where}"
    assert any("/api/v1/runs/{run_id}/series other 404" in s for s in seen), seen
    assert stored(locked.db_url)[0] == 6  # five frames of simple_run + the own write


def test_a_write_token_cannot_read_and_a_read_token_cannot_write(locked: Locked) -> None:
    client, tokens = locked.client, locked.tokens
    reply = client.get(f"/api/v1/runs/{MARK}", headers=bearer(tokens["a-write"]))
    assert reply.status_code == 403 and "needs a read token" in reply.json()["detail"]
    body = b"".join(f.simple_run("new-run", project="a"))
    reply = client.post(
        "/api/v1/ingest", content=body, headers={**f.headers("new-run"), **bearer(tokens["a-read"])}
    )
    assert reply.status_code == 403 and "needs a write token" in reply.json()["detail"]


def test_foreign_write_tokens_cannot_claim_or_extend_another_projects_run(locked: Locked) -> None:
    client, tokens = locked.client, locked.tokens
    before = stored(locked.db_url)
    b_write = bearer(tokens["b-write"])
    # a new run that says it belongs to project a, sent with project b's token
    claim = b"".join(f.simple_run("claims-a", project="a"))
    headers = {**f.headers("claims-a"), **b_write}
    reply = client.post("/api/v1/ingest", content=claim, headers=headers)
    assert reply.status_code == 403
    # project a's existing run, re-started as a run of project b (more frames after seq 5)
    hijack = b"".join(f.frames([f.start(MARK, "b", ["t0", "t1"])], first_seq=50))
    reply = client.post("/api/v1/ingest", content=hijack, headers={**f.headers(MARK), **b_write})
    assert reply.status_code == 404 and "'a'" not in reply.text  # as if unknown: no project
    assert stored(locked.db_url) == before
    listed = client.get("/api/v1/runs", headers=bearer(tokens["b-read"])).json()
    assert [r["id"] for r in listed["data"]] == [OTHER]


def test_a_revoked_token_is_refused_with_a_clear_message(locked: Locked) -> None:
    reply = locked.client.get("/api/v1/runs", headers=bearer(locked.tokens["a-read-revoked"]))
    assert reply.status_code == 401
    assert "was revoked on" in reply.json()["detail"]
    # revoking takes effect on the next request of a running server
    assert locked.client.get("/api/v1/runs", headers=bearer(locked.tokens["a-read"])).is_success
    revoke(locked.settings, locked.tokens["a-read"])
    reply = locked.client.get("/api/v1/runs", headers=bearer(locked.tokens["a-read"]))
    assert reply.status_code == 401


# Objects of project a, asked for by project b's own tokens: each must look unknown.
OBJECT_PARAMS = {"run_id": (MARK, "no-such-run"), "key": ("only-a:none", "nope:none")}


def _looks_unknown(foreign: Any, unknown: Any, ids: tuple[str, str], where: str) -> None:
    assert foreign.status_code == unknown.status_code == 404, f"{where}: {foreign.text[:200]}"
    detail = unknown.json()["detail"].replace(ids[1], ids[0])
    assert foreign.json()["detail"] == detail, where


def test_foreign_objects_under_the_callers_own_token_look_unknown(locked: Locked) -> None:
    """Every route taking a run id, group key or rule id, called by project b with its own
    token and project a's object, answers exactly as for an unknown object (404, no project
    named); ids inside queries and bodies (compare, baseline run, deliveries) too."""
    client, tokens = locked.client, locked.tokens
    a_write, a_read = bearer(tokens["a-write"]), bearer(tokens["a-read"])
    hook = {"project": "a", "min_severity": "info", "webhook_url": "http://93.184.216.34/h"}
    rule = client.post("/api/v1/alert-rules", json=hook, headers=a_write).json()["id"]
    finding = {"check": "loss-nan", "severity": "error", "step": 3, "message": "m"}
    extra = [Record(Kind.FINDINGS, {"findings": [finding]})]
    a_only = [f.start("a-only", "a", config_hash="only-a")]
    for run, records in ((MARK, extra), ("a-only", a_only)):
        body = b"".join(f.frames(records, first_seq=60))
        reply = client.post("/api/v1/ingest", content=body, headers={**f.headers(run), **a_write})
        assert reply.status_code == 200, reply.text
    params = {**OBJECT_PARAMS, "rule_id": (str(rule), "999999")}
    covered = 0
    for route in app_routes(locked.app):
        names = set(re.findall(r"\{(\w+)\}", route.path)) & set(params)
        for method in sorted(route.methods) if route.api and names else ():
            (name,) = names
            token = bearer(token_for("other", route.decision or "read", tokens))
            body = {"run": OTHER} if method == "PUT" else {"enabled": False}
            replies = [
                client.request(
                    method,
                    route.path.replace("{" + name + "}", value),
                    headers=token,
                    **({"json": body} if method in ("PUT", "PATCH") else {}),
                )
                for value in params[name]
            ]
            _looks_unknown(*replies, params[name], f"{method} {route.path}")
            covered += 1
    assert covered >= 10
    b_read, b_write = bearer(tokens["b-read"]), bearer(tokens["b-write"])
    compare = [
        client.get("/api/v1/compare", params={"a": run, "b": OTHER}, headers=b_read)
        for run in (MARK, "no-such-run")
    ]
    _looks_unknown(*compare, (MARK, "no-such-run"), "compare")
    pins = [  # b's own group key (both projects have one), project a's run as its baseline
        client.put("/api/v1/groups/cfg1:none/baseline", json={"run": run}, headers=b_write)
        for run in (MARK, "no-such-run")
    ]
    _looks_unknown(*pins, (MARK, "no-such-run"), "baseline")
    assert client.get("/api/v1/groups/cfg1:none", headers=a_read).json()["baseline"] is None
    # the alert's own id (sequences on PostgreSQL go on across the session's tests)
    (alert,) = client.get("/api/v1/alerts", params={"run": MARK}, headers=a_read).json()["data"]
    for query in ({"rule": rule}, {"alert": alert["id"]}):
        mine = client.get("/api/v1/alert-deliveries", params=query, headers=a_read).json()
        theirs = client.get("/api/v1/alert-deliveries", params=query, headers=b_read).json()
        assert (mine["count"], theirs) == (1, {"data": [], "count": 0}), query
    alerts = client.get("/api/v1/alerts", params={"run": MARK}, headers=b_read).json()
    assert alerts == {"data": [], "count": 0}
