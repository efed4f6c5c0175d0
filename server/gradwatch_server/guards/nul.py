"""ASGI guard: a request whose path or query holds a NUL character is refused with 400.

No database stores NUL in text (PostgreSQL raises on it), and no valid gradwatch name
contains one, so it is cheaper and safer to refuse it at the door than in every route.
"""

from __future__ import annotations

import urllib.parse

from starlette.types import ASGIApp, Receive, Scope, Send

from gradwatch_server.jsonresp import GWJSONResponse


class RejectNul:
    """Wraps an ASGI app; see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 400 for a NUL in the path or query, else pass the request on."""
        if scope["type"] == "http" and _has_nul(scope):
            response = GWJSONResponse(
                {"detail": "the URL contains a NUL character (%00); remove it"}, status_code=400
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _has_nul(scope: Scope) -> bool:
    path = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "replace")
    query = scope.get("query_string", b"")
    return any(b"\x00" in urllib.parse.unquote_to_bytes(part) for part in (path, query))
