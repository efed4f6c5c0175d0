"""The dashboard's WSGI bridge: the Flask app behind ``a2wsgi`` with a bounded pool.

``a2wsgi`` runs each request on one of ``WORKERS`` threads. Two things keep a client from
holding them: the server's body guard (:mod:`gradwatch_server.guards.bodylimit`) hands a request
on only once its body is complete, and here at most ``WORKERS`` requests enter the bridge
at once; a request that waits more than ``WAIT_S`` for a slot is answered 503 (retry), so
a flood of page requests queues briefly and then fails fast instead of hanging pages.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

WORKERS = 10
WAIT_S = 10.0


class Bounded:
    """An ASGI app that lets at most ``slots`` requests into ``app`` at once."""

    def __init__(self, app: ASGIApp, slots: int = WORKERS, wait: float = WAIT_S) -> None:
        self.app = app
        self.wait = wait
        self._slots = asyncio.Semaphore(slots)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request in a free slot, or answer 503 after ``wait`` seconds."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await asyncio.wait_for(self._slots.acquire(), self.wait)
        except TimeoutError:
            await _busy(scope, receive, send, self.wait)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()


async def _busy(scope: Scope, receive: Receive, send: Send, wait: float) -> None:
    from starlette.responses import PlainTextResponse

    text = f"the dashboard is busy (no free worker within {wait:g} s); reload in a moment"
    await PlainTextResponse(text, status_code=503, headers={"Retry-After": "1"})(
        scope, receive, send
    )


def bridge(flask_app: Any, slots: int = WORKERS, wait: float = WAIT_S) -> Bounded:
    """``flask_app`` as a bounded ASGI app."""
    from a2wsgi import WSGIMiddleware

    wsgi: Any = WSGIMiddleware(flask_app, workers=slots)  # a2wsgi's own ASGI types
    return Bounded(wsgi, slots, wait)
