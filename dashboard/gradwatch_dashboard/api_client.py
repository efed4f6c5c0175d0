"""The dashboard's HTTP client for the server's query API (``/api/v1``); standard library only.

The dashboard reads every value through this API, mounted in the same process: a Dash
callback asks the server it is served by (the address the request came in on), with the
caller's read token when the server requires tokens (cookie ``gradwatch_token``). Bounded
requests only: series are asked for with a ``points`` budget, lists with a ``limit``.

Example::

    api = Api("http://127.0.0.1:8765")
    runs = api.get("/runs", limit=50)["data"]
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from gradwatch.wire import from_jsonable

PREFIX = "/api/v1"
TOKEN_COOKIE = "gradwatch_token"


class ApiError(Exception):
    """The API answered with an error (or could not be reached)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class Api:
    """GET/POST/PATCH/DELETE JSON on ``base_url`` + ``/api/v1``."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def get(self, path: str, **params: Any) -> Any:
        """``GET path?params`` (lists repeat the key; ``None`` values are left out)."""
        return self.request("GET", path, params=params)

    def request(
        self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None
    ) -> Any:
        """One request; the decoded JSON reply (``None`` for 204), or ``ApiError``."""
        query = urllib.parse.urlencode(
            [(k, v) for k, v in (params or {}).items() if v is not None], doseq=True
        )
        url = f"{self.base_url}{PREFIX}{path}" + (f"?{query}" if query else "")
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, _detail(e.read())) from e
        except OSError as e:
            raise ApiError(0, f"the server at {self.base_url} is unreachable ({e})") from e
        return from_jsonable(json.loads(raw)) if raw else None  # details: {"$f": "nan"}


def _detail(raw: bytes) -> str:
    try:
        detail = json.loads(raw).get("detail")
    except (ValueError, AttributeError):
        return raw.decode(errors="replace")[:300]
    return str(detail)


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
    return Api(base, token=flask.request.cookies.get(TOKEN_COOKIE))
