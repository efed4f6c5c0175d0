"""The dashboard's HTTP client for the server's query API (``/api/v1``); standard library only.

The client is :class:`gradwatch.core.client.Api`, the one client of the API. The
dashboard reads every value through this API, mounted in the same process: a Dash
callback asks the server it is served by (the address the request came in on), with the
caller's read token when the server requires tokens (cookie ``gradwatch_token``). Bounded
requests only: series are asked for with a ``points`` budget, lists with a ``limit``.

Example::

    api = Api("http://127.0.0.1:8765")
    runs = api.get("/runs", limit=50)["data"]
"""

from __future__ import annotations

from gradwatch.core.client import Api, ApiError

__all__ = ["TOKEN_COOKIE", "Api", "ApiError", "from_request"]

TOKEN_COOKIE = "gradwatch_token"
#: a page waits at most this long for one of its requests
DASHBOARD_TIMEOUT = 30.0


def from_request() -> Api:
    """The API of the server this Dash request came in on (call inside a callback)."""
    import flask

    env = flask.request.environ
    host = env.get("SERVER_NAME") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    base = f"http://{host}:{env.get('SERVER_PORT', '80')}"
    return Api(base, token=flask.request.cookies.get(TOKEN_COOKIE), timeout=DASHBOARD_TIMEOUT)
