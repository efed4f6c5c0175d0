"""``/login``: keeps a read token in a cookie, for servers that require tokens.

The token travels in a POST body, never in the URL (URLs are logged by access logs and
proxies, kept in browser history and sent as ``Referer``). ``GET /login`` shows a form
and sets a random CSRF cookie (``SameSite=Strict``); ``POST /login`` accepts the token
only with that cookie echoed in the form and, when the browser sends ``Origin``, from this
same host. So another site cannot log a visitor in with the other site's token (login
CSRF). The token is checked before it is kept: the dashboard asks the API it is served
with (``GET /api/v1/runs?limit=1``) with the token, and a token the API refuses (unknown,
revoked: 401; a write token: 403) or an empty one gets the form again with the reason and
no cookie; a server that requires no token says so, and keeps nothing either. A token
that reads sets the cookie, ``HttpOnly`` and ``SameSite=Strict`` (and ``Secure`` over
HTTPS).
"""

from __future__ import annotations

import hmac
import html
import secrets
import urllib.parse
from typing import Any

from gradwatch_dashboard.api_client import TOKEN_COOKIE, ApiError, from_request

CSRF_COOKIE = "gradwatch_login_csrf"
FORM = """<!doctype html><html><head><title>gradwatch: log in</title></head><body>
{problem}<form method="post" action="/login">
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
        reply = flask.make_response(FORM.format(csrf=html.escape(csrf), problem=""))
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
        token = request.form.get("token", "").strip()
        problem = token_problem(token)
        if problem is not None:  # the form again, with the reason; nothing is kept
            status, why = problem
            page = FORM.format(
                csrf=html.escape(sent),
                problem=f'<p role="alert" id="login-problem">{html.escape(why)}</p>\n',
            )
            return flask.Response(page, status=status, mimetype="text/html")
        reply = flask.redirect("/", code=303)
        reply.set_cookie(
            TOKEN_COOKIE,
            token,
            httponly=True,
            samesite="Strict",
            secure=request.is_secure,
        )
        reply.delete_cookie(CSRF_COOKIE)
        return reply


def token_problem(token: str) -> tuple[int, str] | None:
    """``None`` when ``token`` reads this server's runs, else the status and the sentence
    the login page shows (asks the API this request came in on)."""
    if not token:
        return 400, "Enter a read token (gradwatch serve --create-token PROJECT --scope read)."
    if not all("!" <= c <= "~" for c in token) or len(token) > 256:
        return 401, "This is not a gradwatch token (they are letters, digits, '_' and '-')."
    api = from_request()
    try:
        api.token = None
        api.get("/runs", limit=1)
    except ApiError as e:
        if e.status == 0:
            return 503, f"The token could not be checked: {e.detail}. Try again in a moment."
    else:
        return 400, "This server requires no token: open the dashboard at / without logging in."
    api.token = token
    try:
        api.get("/runs", limit=1)
    except ApiError as e:
        if e.status == 403:
            return (
                403,
                f"This token cannot open the dashboard: {e.detail}. Log in with a read token.",
            )
        if e.status == 401:
            return 401, f"This token was not accepted: {e.detail}."
        return 503, f"The token could not be checked (HTTP {e.status}: {e.detail}); try again."
    return None


def _same_origin(request: Any) -> bool:
    """True without an ``Origin`` header (older browsers), else when it names this host."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return bool(urllib.parse.urlsplit(str(origin)).netloc == str(request.host))


def _refuse(status: int, why: str) -> Any:
    import flask

    return flask.Response(why, status=status, mimetype="text/plain")
