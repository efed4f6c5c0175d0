"""``/login``: keeps a read token in a cookie, for servers that require tokens.

The token travels in a POST body, never in the URL (URLs are logged by access logs and
proxies, kept in browser history and sent as ``Referer``). ``GET /login`` shows a form
and sets a random CSRF cookie (``SameSite=Strict``); ``POST /login`` accepts the token
only with that cookie echoed in the form and, when the browser sends ``Origin``, from this
same host. So another site cannot log a visitor in with the other site's token (login
CSRF). The token cookie is ``HttpOnly`` and ``SameSite=Strict`` (and ``Secure`` over
HTTPS).
"""

from __future__ import annotations

import hmac
import html
import secrets
import urllib.parse
from typing import Any

from gradwatch_dashboard.api_client import TOKEN_COOKIE

CSRF_COOKIE = "gradwatch_login_csrf"
FORM = """<!doctype html><html><head><title>gradwatch: log in</title></head><body>
<form method="post" action="/login">
<label>Read token <input type="password" name="token" autocomplete="off" autofocus></label>
<input type="hidden" name="csrf" value="{csrf}">
<button type="submit">Log in</button></form></body></html>"""


def add_login(server: Any) -> None:
    """Register ``GET`` and ``POST /login`` on the dashboard's Flask ``server``."""
    import flask

    @server.route("/login", methods=["GET"])  # type: ignore[untyped-decorator]
    def login_form() -> Any:
        if "token" in flask.request.args:
            return _refuse(400, "send the token in the login form (a POST body), never in the URL")
        csrf = secrets.token_urlsafe(24)
        reply = flask.make_response(FORM.format(csrf=html.escape(csrf)))
        reply.set_cookie(
            CSRF_COOKIE, csrf, httponly=True, samesite="Strict", secure=flask.request.is_secure
        )
        return reply

    @server.route("/login", methods=["POST"])  # type: ignore[untyped-decorator]
    def login() -> Any:
        request = flask.request
        expected = request.cookies.get(CSRF_COOKIE, "")
        sent = request.form.get("csrf", "")
        if not expected or not hmac.compare_digest(expected, sent) or not _same_origin(request):
            return _refuse(403, "the login form expired or came from another site; reload /login")
        reply = flask.redirect("/", code=303)
        reply.set_cookie(
            TOKEN_COOKIE,
            request.form.get("token", "").strip(),
            httponly=True,
            samesite="Strict",
            secure=request.is_secure,
        )
        reply.delete_cookie(CSRF_COOKIE)
        return reply


def _same_origin(request: Any) -> bool:
    """True without an ``Origin`` header (older browsers), else when it names this host."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return bool(urllib.parse.urlsplit(str(origin)).netloc == str(request.host))


def _refuse(status: int, why: str) -> Any:
    import flask

    return flask.Response(why, status=status, mimetype="text/plain")
