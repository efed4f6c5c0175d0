"""DNS rebinding and cross-site writes: the server's ``Host`` and ``Origin`` checks, on a
real tokenless server on loopback (``gradwatch_server.guards.hostcheck``)."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from pathlib import Path

import pytest

from gradwatch_server.guards.hostcheck import HostPolicy, host_name, parse_allowed_hosts
from gradwatch_server.settings import ALLOWED_HOSTS_ENV, Settings
from tests.server.live import live_server


def _ask(
    base: str, method: str, path: str, host: str | None = None, **headers: str
) -> tuple[int, str, bytes]:
    """One raw request to ``base`` with exactly the ``Host`` given (http.client's own
    otherwise): status, content type, body."""
    where = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=host is not None, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host)
        body = b"{}" if method in ("POST", "PUT", "PATCH") else b""
        if body:
            headers.setdefault("Content-Type", "application/json")
        for key, value in headers.items():
            conn.putheader(key.replace("_", "-"), value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        reply = conn.getresponse()
        return reply.status, reply.getheader("Content-Type", ""), reply.read()
    finally:
        conn.close()


@pytest.fixture
def tokenless(db_url: str, data_dir: Path) -> Settings:
    settings = Settings(db_url=db_url, data_dir=data_dir, import_interval=None)
    settings = settings.with_(monitor_interval=None)
    assert not settings.require_tokens
    return settings


FOREIGN = ("attacker.example", "attacker.example:8765", "127.0.0.1.attacker.example", "evil")
PATHS = ("/api/v1/runs", "/api/v1/alert-rules", "/", "/_dash-layout", "/docs", "/login")


def test_foreign_host_is_refused_before_any_route(tokenless: Settings) -> None:
    with live_server(tokenless) as base:
        port = urllib.parse.urlsplit(base).port
        for path in PATHS:
            for host in FOREIGN:
                status, kind, body = _ask(base, "GET", path, host)
                assert status == 400, (path, host, status)
                assert kind.startswith("application/json")
                assert "DNS rebinding" in json.loads(body)["detail"]
                assert "--allowed-host" in json.loads(body)["detail"]
            status, _, _ = _ask(base, "POST", "/_dash-update-component", "attacker.example")
            assert status == 400
            status, _, _ = _ask(base, "POST", "/api/v1/alert-rules", "attacker.example")
            assert status == 400
            # the names and addresses of loopback, with and without a port, are served
            for host in (
                "localhost",
                f"localhost:{port}",
                f"127.0.0.1:{port}",
                "[::1]:1",
                "LOCALHOST.",
            ):
                status, _, _ = _ask(base, "GET", path, host)
                assert status == 200, (path, host, status)


ROUTER_CALL = {
    "output": "..page.children...routed.data..",
    "outputs": [{"id": "page", "property": "children"}, {"id": "routed", "property": "data"}],
    "inputs": [
        {"id": "url", "property": "pathname", "value": "/"},
        {"id": "url", "property": "search", "value": ""},
    ],
    "state": [{"id": "routed", "property": "data", "value": False}],
    "changedPropIds": ["url.pathname"],
}


def router_call(base: str, host: str | None = None, **headers: str) -> tuple[int, bytes]:
    """The dashboard's router callback (which reads the run list from the API over HTTP)."""
    where = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
    try:
        body = json.dumps(ROUTER_CALL).encode()
        conn.request(
            "POST",
            "/_dash-update-component",
            body,
            {"Content-Type": "application/json", **({"Host": host} if host else {}), **headers},
        )
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def test_the_dashboard_callback_works_at_the_served_address(tokenless: Settings) -> None:
    """A Dash callback from the page at the address ``serve`` prints answers (with the
    runs page laid out); the same callback under a rebound name is refused."""
    with live_server(tokenless) as base:
        assert _ask(base, "GET", "/_dash-layout")[0] == 200
        status, body = router_call(base, Origin=base)
        assert status == 200, body[:300]
        assert b"runs" in body.lower()
        assert router_call(base, "attacker.example", Origin="http://attacker.example")[0] == 400


def test_allowed_hosts_from_the_option_and_the_environment(
    tokenless: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ALLOWED_HOSTS_ENV, " gw.example.com , ,proxy.lan")
    settings = Settings.from_env(
        db=tokenless.db_url, data_dir=str(tokenless.data_dir), allowed_hosts=("Named.Example",)
    )
    assert settings.allowed_hosts == ("Named.Example", "gw.example.com", "proxy.lan")
    settings = settings.with_(import_interval=None, monitor_interval=None)
    with live_server(settings) as base:
        for host in ("gw.example.com", "gw.example.com:443", "named.example", "proxy.lan:80"):
            assert _ask(base, "GET", "/api/v1/runs", host)[0] == 200, host
        assert _ask(base, "GET", "/api/v1/runs", "other.example.com")[0] == 400
        # a write from the proxy's public origin passes the Origin check (422: empty body)
        got = _ask(
            base, "POST", "/api/v1/alert-rules", "gw.example.com", Origin="https://gw.example.com"
        )
        assert got[0] == 422, got


def test_writes_from_a_foreign_origin_are_refused(tokenless: Settings) -> None:
    with live_server(tokenless) as base:
        port = urllib.parse.urlsplit(base).port
        for path in ("/api/v1/alert-rules", "/_dash-update-component", "/login"):
            for origin in ("http://attacker.example", "null", f"http://evil.test:{port}"):
                status, _, body = _ask(base, "POST", path, Origin=origin)
                assert status == 403, (path, origin, status)
                assert "another site" in json.loads(body)["detail"]
            for method in ("PATCH", "DELETE"):
                assert (
                    _ask(base, method, "/api/v1/alert-rules/1", Origin="http://a.example")[0] == 403
                )
        # the same write from the served address's own page, and without Origin, reaches the route
        for headers in (
            {"Origin": f"http://127.0.0.1:{port}"},
            {"Origin": "http://localhost:3"},
            {},
        ):
            status, _, _ = _ask(base, "POST", "/api/v1/alert-rules", **headers)
            assert status == 422, (headers, status)  # the empty rule is invalid: the route ran
        # reads are never refused for their Origin (the Host check covers them)
        assert _ask(base, "GET", "/api/v1/runs", Origin="http://attacker.example")[0] == 200


def test_policy_names() -> None:
    assert host_name("[::1]:8765") == "::1"
    assert host_name("Example.COM.:80") == "example.com"
    assert host_name("::1") == "::1"
    assert parse_allowed_hosts("a, b,,") == ("a", "b")
    loop = HostPolicy("127.0.0.1")
    assert loop.allows("127.0.0.5") and loop.allows("::1") and loop.allows("localhost")
    assert not loop.allows("10.0.0.1") and not loop.allows("example.com")
    wild = HostPolicy("0.0.0.0", ["gw.lan"])
    assert wild.allows("10.0.0.1") and wild.allows("gw.lan") and not wild.allows("x.lan")
    lan = HostPolicy("192.168.1.5")
    assert lan.allows("192.168.1.5") and not lan.allows("192.168.1.6")
    assert HostPolicy("127.0.0.1", ["*"]).allows("anything.example")
