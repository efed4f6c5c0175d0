"""``/login``: the token in a POST body, never the URL; no login CSRF (issue 19 item 10);
the token is checked before it is kept (issue 42 item 6). A real server on loopback that
requires tokens: the login asks its API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from gradwatch_dashboard.api_client import TOKEN_COOKIE
from gradwatch_dashboard.login import CSRF_COOKIE
from gradwatch_server.auth import create_token, revoke_token
from gradwatch_server.db import make_engine, write_session
from gradwatch_server.migrate import migrate
from gradwatch_server.settings import Settings
from tests.server.live import live_server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A live server that requires tokens, and its tokens: read, write and revoked."""
    root = tmp_path_factory.mktemp("login")
    url = f"sqlite:///{root / 'gw.db'}"
    engine = make_engine(url)
    migrate(engine)
    with write_session(engine) as session:
        tokens = {
            "read": create_token(session, project="vision", scope="read"),
            "write": create_token(session, project="vision", scope="write"),
            "revoked": create_token(session, project="vision", scope="read"),
        }
    with write_session(engine) as session:
        revoke_token(session, tokens["revoked"])
    engine.dispose()
    settings = Settings(
        db_url=url,
        data_dir=root / "data",
        require_tokens=True,
        import_interval=None,
        monitor_interval=None,
    )
    with live_server(settings) as base:
        yield base, tokens


@pytest.fixture
def client(served: tuple[str, dict[str, str]]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], timeout=30) as c:
        yield c


def form_csrf(client: httpx.Client) -> str:
    page = client.get("/login")
    assert page.status_code == 200 and 'method="post"' in page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def token_cookie(reply: httpx.Response) -> str:
    cookies = reply.headers.get_list("set-cookie")
    return "; ".join(v for v in cookies if TOKEN_COOKIE in v)


def test_a_token_in_the_url_is_refused_and_never_kept(client: httpx.Client) -> None:
    reply = client.get("/login", params={"token": "gw_secret"})
    assert reply.status_code == 400 and "never in the URL" in reply.text
    assert token_cookie(reply) == ""


def test_a_read_token_is_kept_in_a_strict_httponly_cookie(
    client: httpx.Client, served: tuple[str, dict[str, str]]
) -> None:
    token = served[1]["read"]
    csrf = form_csrf(client)
    reply = client.post("/login", data={"token": f" {token} ", "csrf": csrf})
    assert reply.status_code == 303 and reply.headers["location"] == "/"
    cookie = token_cookie(reply)
    assert f"{TOKEN_COOKIE}={token};" in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    # the dashboard then reads with it: a callback's API call carries the cookie's token
    assert client.get("/api/v1/runs", headers={"Authorization": f"Bearer {token}"}).is_success


@pytest.mark.parametrize(
    ("which", "status", "said"),
    [
        ("wrong", 401, "This token was not accepted: unknown API token"),
        ("revoked", 401, "This token was not accepted: this API token was revoked"),
        ("write", 403, "cannot open the dashboard: this is a write token of project 'vision'"),
        ("empty", 400, "Enter a read token"),
        ("not-a-token", 401, "This is not a gradwatch token"),
    ],
)
def test_a_token_that_cannot_read_is_named_on_the_page_and_not_kept(
    client: httpx.Client, served: tuple[str, dict[str, str]], which: str, status: int, said: str
) -> None:
    token = {"wrong": "gw_mistyped", "empty": "  ", "not-a-token": "gw ünï\tcode"}.get(
        which, served[1].get(which, "")
    )
    csrf = form_csrf(client)
    reply = client.post("/login", data={"token": token, "csrf": csrf})
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("text/html")
    problem = re.search(r'<p role="alert" id="login-problem">(.*?)</p>', reply.text)
    assert problem is not None and said in problem.group(1).replace("&#x27;", "'"), reply.text
    assert token_cookie(reply) == "" and TOKEN_COOKIE not in client.cookies
    assert f'name="csrf" value="{csrf}"' in reply.text  # the form again, to try once more
    # and it works on the second try, from the same form
    again = client.post("/login", data={"token": served[1]["read"], "csrf": csrf})
    assert again.status_code == 303 and token_cookie(again)
    client.cookies.clear()


def test_a_server_without_tokens_keeps_none(tmp_path: Path, data_dir: Path) -> None:
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'open.db'}",
        data_dir=data_dir,
        import_interval=None,
        monitor_interval=None,
    )
    with live_server(settings) as base, httpx.Client(base_url=base, timeout=30) as client:
        reply = client.post("/login", data={"token": "gw_any", "csrf": form_csrf(client)})
        assert reply.status_code == 400 and "requires no token" in reply.text
        assert token_cookie(reply) == ""


def test_a_login_from_another_site_is_refused(client: httpx.Client) -> None:
    # no CSRF cookie/field: what a cross-site auto-submitted form carries
    client.cookies.clear()
    forged = client.post("/login", data={"token": "gw_attacker"})
    assert forged.status_code == 403 and token_cookie(forged) == ""
    csrf = form_csrf(client)
    elsewhere = client.post(
        "/login",
        data={"token": "gw_attacker", "csrf": csrf},
        headers={"Origin": "https://evil.example"},
    )
    assert elsewhere.status_code == 403 and token_cookie(elsewhere) == ""
    assert client.cookies.get(CSRF_COOKIE) == csrf
