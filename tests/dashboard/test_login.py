"""``/login``: the token in a POST body, never the URL; no login CSRF (issue 19 item 10)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gradwatch_dashboard.api_client import TOKEN_COOKIE
from gradwatch_dashboard.login import CSRF_COOKIE
from gradwatch_server.app import create_app
from gradwatch_server.settings import Settings


@pytest.fixture
def client(tmp_path: Path, data_dir: Path) -> Iterator[TestClient]:
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'gw.db'}",
        data_dir=data_dir,
        require_tokens=True,
        import_interval=None,
        monitor_interval=None,
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8765") as c:
        yield c


def form_csrf(client: TestClient) -> str:
    page = client.get("/login")
    assert page.status_code == 200 and 'method="post"' in page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def token_cookie(reply: Any) -> str:
    cookies = reply.headers.get_list("set-cookie")
    return "; ".join(v for v in cookies if TOKEN_COOKIE in v)


def test_a_token_in_the_url_is_refused_and_never_kept(client: TestClient) -> None:
    reply = client.get("/login", params={"token": "gw_secret"}, follow_redirects=False)
    assert reply.status_code == 400 and "never in the URL" in reply.text
    assert token_cookie(reply) == ""


def test_the_form_posts_the_token_into_a_strict_httponly_cookie(client: TestClient) -> None:
    csrf = form_csrf(client)
    reply = client.post("/login", data={"token": "gw_secret", "csrf": csrf}, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == "/"
    cookie = token_cookie(reply)
    assert "gw_secret" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_a_login_from_another_site_is_refused(client: TestClient) -> None:
    # no CSRF cookie/field: what a cross-site auto-submitted form carries
    client.cookies.clear()
    forged = client.post("/login", data={"token": "gw_attacker"}, follow_redirects=False)
    assert forged.status_code == 403 and token_cookie(forged) == ""
    csrf = form_csrf(client)
    elsewhere = client.post(
        "/login",
        data={"token": "gw_attacker", "csrf": csrf},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert elsewhere.status_code == 403 and token_cookie(elsewhere) == ""
    assert client.cookies.get(CSRF_COOKIE) == csrf
