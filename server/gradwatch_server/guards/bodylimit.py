"""ASGI guard: every request body is read here, bounded in size and time, before any route,
parser, token check or the dashboard's WSGI bridge sees it.

- Size: ``Content-Length`` over the limit is refused at once (413); a body without one
  (chunked) is counted as it arrives and refused as soon as it passes the limit. The
  limit is ``Settings.max_body_bytes`` for ``/api/v1/ingest`` (batches of frames) and
  ``Settings.max_json_bytes`` for every other route, API and dashboard alike (JSON).
- Time: the whole body must arrive within ``Settings.body_timeout`` seconds (408), so a
  client trickling a body holds a coroutine at most that long, never a worker thread: the
  dashboard's bridge starts its thread only once the body is complete.

The app then receives the buffered body, so nothing downstream can read past the limit.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gradwatch_server.jsonresp import GWJSONResponse

INGEST_PATH = "/api/v1/ingest"


class BodyTooLargeError(Exception):
    """The body passed its limit."""


class BodyRefusedError(Exception):
    """The body is refused: ``status`` (413 or 408) and the reply's ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_limited(receive: Receive, declared: bytes, settings: Any) -> bytes:
    """An ingest request's body as :class:`BodyLimit` reads it (``declared``: its last
    Content-Length header, or empty), or ``BodyRefusedError`` with BodyLimit's reply."""
    limit, timeout = settings.max_body_bytes, settings.body_timeout
    try:
        if declared.isdigit() and int(declared) > limit:
            raise BodyTooLargeError
        return await _within(_read(receive, limit), timeout)
    except BodyTooLargeError:
        raise BodyRefusedError(413, _too_large(limit, INGEST_PATH)) from None
    except TimeoutError:
        raise BodyRefusedError(408, _too_slow(timeout)) from None


if sys.version_info >= (3, 11):

    async def _within(read: Coroutine[Any, Any, bytes], timeout: float) -> bytes:
        """``read`` within ``timeout`` seconds (TimeoutError), without a task of its own."""
        async with asyncio.timeout(timeout):
            return await read

else:  # pragma: no cover - Python 3.10

    async def _within(read: Coroutine[Any, Any, bytes], timeout: float) -> bytes:
        return await asyncio.wait_for(read, timeout)


class BodyLimit:
    """Wraps an ASGI app; see the module docstring."""

    def __init__(self, app: ASGIApp, *, ingest_bytes: int, other_bytes: int, timeout: float):
        self.app = app
        self.ingest_bytes = ingest_bytes
        self.other_bytes = other_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read and check the body, then hand the request on with the body replayed."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.ingest_bytes if scope.get("path") == INGEST_PATH else self.other_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        try:
            if declared.isdigit() and int(declared) > limit:
                raise BodyTooLargeError
            body = await _within(_read(receive, limit), self.timeout)
        except BodyTooLargeError:
            await refuse(scope, receive, send, 413, _too_large(limit, scope.get("path", "")))
            return
        except TimeoutError:
            await refuse(scope, receive, send, 408, _too_slow(self.timeout))
            return
        await self.app(scope, _replay(body, receive), send)


async def _read(receive: Receive, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return b"".join(parts)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as usual

    return replayed


def _too_large(limit: int, path: str) -> str:
    what = "send smaller batches of frames" if path == INGEST_PATH else "send a smaller body"
    return f"request body over the {limit:,}-byte limit of this route; {what}"


def _too_slow(timeout: float) -> str:
    return f"the request body did not arrive within {timeout:g} s; send it at once"


async def refuse(scope: Scope, receive: Receive, send: Send, status: int, why: str) -> None:
    reply = GWJSONResponse({"detail": why}, status_code=status, headers={"Connection": "close"})
    await reply(scope, receive, send)
