"""The one HTTP client of the server's query API (``/api/v1``); standard library only.

Every reader of a server goes through :class:`Api`: the ``runs``, ``findings`` and
``compare`` commands, the pandas reader (``gradwatch.open_run(..., server=)``) and the
dashboard. One rule for each concern:

- **timeouts**: :data:`TIMEOUT` seconds per request; :data:`SLOW_TIMEOUT` for a request
  whose answer the server computes from whole runs (``/compare``).
- **errors**: an answer that is not 2xx raises :class:`ApiError` with the status and the
  reply's ``detail``; 404 is also a ``LookupError`` (:class:`NotFoundError`), 401/403 also a
  ``PermissionError`` (:class:`RefusedError`); a server that cannot be reached is status 0.
  Every ``ApiError`` is an ``OSError``, as ``urllib``'s errors are.
- **NaN**: free-form objects in a reply carry non-finite floats in the tagged form
  (``{"$f": "nan"}``), decoded here (:func:`gradwatch.core.nonfinite.from_jsonable`); float
  fields carry them as names (``"NaN"``), decoded by the reader that knows the field
  (:func:`gradwatch.core.nonfinite.decode_float`).
- **pagination**: :meth:`Api.pages` follows ``offset``/``limit`` until the reply's ``count``.

Example::

    api = Api("http://127.0.0.1:8765")
    runs = api.pages("/runs", page=1000)
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from gradwatch.core.nonfinite import loads_tagged

PREFIX = "/api/v1"
#: seconds a request may take
TIMEOUT = 60.0
#: seconds for a request the server answers from whole runs (a comparison)
SLOW_TIMEOUT = 120.0


class ApiError(OSError):
    """The API answered with an error, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, detail: str, path: str = "") -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.path = path


class NotFoundError(ApiError, LookupError):
    """404: the server has nothing at that path (no such run)."""


class RefusedError(ApiError, PermissionError):
    """401/403: the request needs a (read) token of the run's project."""


def _error(status: int, detail: str, path: str) -> ApiError:
    cls = NotFoundError if status == 404 else RefusedError if status in (401, 403) else ApiError
    return cls(status, detail, path)


def detail_of(raw: bytes) -> str:
    """The ``detail`` of an error reply (its first 300 characters when it is not JSON)."""
    try:
        detail = json.loads(raw).get("detail")
    except (ValueError, AttributeError):
        return raw.decode(errors="replace")[:300]
    return str(detail)


class Api:
    """GET/POST/PATCH/DELETE JSON on ``base_url`` + ``/api/v1``, with a bearer ``token``."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = TIMEOUT) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def get(self, path: str, **params: Any) -> Any:
        """``GET path?params`` (lists repeat the key; ``None`` values are left out)."""
        return self.request("GET", path, params=params)

    def pages(self, path: str, page: int, **params: Any) -> list[Any]:
        """Every item of a paged list (``{"data": [...], "count": n}``), ``page`` at a time."""
        out: list[Any] = []
        while True:
            reply = self.get(path, **params, offset=len(out), limit=page)
            out += reply["data"]
            if not reply["data"] or len(out) >= reply["count"]:
                return out

    def request(
        self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None
    ) -> Any:
        """One request; the decoded JSON reply (``None`` for an empty one), or ``ApiError``."""
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
            with e:  # closes the reply's socket
                raise _error(e.code, detail_of(e.read()), path) from e
        except OSError as e:
            raise ApiError(0, f"the server at {self.base_url} is unreachable ({e})", path) from e
        return loads_tagged(raw) if raw else None
