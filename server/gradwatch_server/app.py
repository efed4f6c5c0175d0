"""``create_app(settings)``: the FastAPI application, its database and background import.

Nothing is created at import time: the engine is built, migrated and disposed with the
app. The Dash dashboard (:mod:`gradwatch_dashboard`) is mounted at ``/`` after the API
routes and the ``/api/...`` catch-all (a JSON 404), so one process serves both. The local
spool import (see :mod:`gradwatch_server.ingest.spool_import`) runs on a thread for the app's
lifetime when ``settings.import_interval`` is set.

Example::

    app = create_app(Settings.from_env())
    uvicorn.run(app, host="127.0.0.1", port=8765)
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline  # type: ignore[import-not-found,unused-ignore]
from sqlalchemy.exc import OperationalError
from starlette.types import ASGIApp

from gradwatch._version import __version__
from gradwatch_server.alerts.webhooks import WebhookPolicy
from gradwatch_server.api.deps import ReadAccess
from gradwatch_server.api.routes import api_router
from gradwatch_server.api.routes.ingest import IngestFront
from gradwatch_server.db import make_engine
from gradwatch_server.exceptions import RequestError
from gradwatch_server.guards.bodylimit import INGEST_PATH, BodyLimit
from gradwatch_server.guards.hostcheck import HostCheck, HostPolicy
from gradwatch_server.guards.nul import RejectNul
from gradwatch_server.ingest.batch_writer import IngestWriter
from gradwatch_server.ingest.spool_import import SpoolImporter
from gradwatch_server.jsonresp import GWJSONResponse, database_busy
from gradwatch_server.migrate import migrate
from gradwatch_server.monitor import Monitor
from gradwatch_server.settings import Settings

API_PREFIX = "/api/v1"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
log = logging.getLogger("gradwatch_server")


#: at most this long the server's start waits for its prepare helper (its imports)
HELPER_START_S = 30.0


async def _helper_started(writer: IngestWriter, timeout: float) -> None:
    """Wait (without blocking the loop) until the writer's prepare helper is ready, up to
    ``timeout`` seconds; past that the server starts anyway (the thread prepares)."""
    deadline = time.monotonic() + timeout
    while not writer.helper_started() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def create_app(settings: Settings) -> FastAPI:
    """Build the app for ``settings`` (migrates the database first)."""
    engine = make_engine(settings.db_url)
    migrate(engine)
    writer = IngestWriter(engine, helper=settings.prepare_helper)
    # lifespans of this app that are running: an app served by several clients at once (the
    # tests' TestClients in threads) stops its shared writer and engine after the last one
    lifespans = [0]
    lifespans_lock = threading.Lock()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        quiet_ingest_access_log()
        with lifespans_lock:
            lifespans[0] += 1
        importer, monitor = None, None
        writer.start_helper()
        await _helper_started(writer, HELPER_START_S)
        if settings.import_interval:
            importer = SpoolImporter(engine, settings.data_dir, settings.import_interval)
            importer.start()
        if settings.monitor_interval:
            monitor = Monitor(engine, webhook_policy(settings), settings.monitor_interval)
            monitor.start()
        try:
            yield
        finally:
            if monitor is not None:
                monitor.stop()
            if importer is not None:
                importer.stop()
            with lifespans_lock:
                lifespans[0] -= 1
                last = lifespans[0] == 0
            if last:
                writer.stop()
                engine.dispose()

    # Swagger UI and ReDoc from assets bundled in fastapi-offline, not a CDN: /docs works
    # on a machine without internet access (the import's ignore: the package is typed, but
    # absent where mypy runs without the server extra).
    app: FastAPI = FastAPIOffline(
        title="gradwatch",
        version=__version__,
        description="Training-run integrity monitor: ingest, runs, findings and series.",
        lifespan=lifespan,
        default_response_class=GWJSONResponse,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.ingest_writer = writer
    app.include_router(api_router, prefix=API_PREFIX)
    app.add_api_route(  # after every API route: an unknown /api/... path is a JSON 404
        "/api/{rest:path}", _no_such_route, methods=list(METHODS), include_in_schema=False
    )
    app.add_middleware(RejectNul)
    app.add_middleware(  # outermost: before routing, parsing and the token check
        BodyLimit,
        ingest_bytes=settings.max_body_bytes,
        other_bytes=settings.max_json_bytes,
        timeout=settings.body_timeout,
    )
    app.add_exception_handler(RequestError, _request_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(OperationalError, _database_busy)  # type: ignore[arg-type]
    if settings.dashboard:
        from gradwatch_dashboard.dash_app import mount

        mount(app)
    _front_ingest(app)
    return app


def _front_ingest(app: FastAPI) -> None:
    """Put :class:`HostCheck`, then :class:`IngestFront`, before the app's whole middleware
    stack (Starlette builds the stack on the first request, and again after a middleware is
    added)."""
    build = app.build_middleware_stack

    def build_with_front() -> ASGIApp:
        settings: Settings = app.state.settings
        policy = HostPolicy(settings.host, settings.allowed_hosts)
        return HostCheck(IngestFront(build(), app.state), policy)  # the Host check first

    app.build_middleware_stack = build_with_front  # type: ignore[method-assign]


class _SkipStoredIngest(logging.Filter):
    """Drops uvicorn's access log line of an answered ingest request (``POST
    /api/v1/ingest`` with a 2xx status): one line per run per second under many live runs,
    which cost the event loop more than a tenth of its time per request. RefusedError ingest
    requests and every other request are logged as before."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for an answered ingest request's line."""
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            _, method, path, _, status = args
            if method == "POST" and path == INGEST_PATH and isinstance(status, int):
                return not 200 <= status < 300
        return True


def quiet_ingest_access_log() -> None:
    """Install :class:`_SkipStoredIngest` on uvicorn's access logger (once)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _SkipStoredIngest) for f in access.filters):
        access.addFilter(_SkipStoredIngest())


def webhook_policy(settings: Settings) -> WebhookPolicy:
    """How this server delivers webhooks."""
    return WebhookPolicy(
        allow_private=settings.allow_private_webhooks,
        attempts=settings.webhook_attempts,
        backoff=settings.webhook_backoff,
        timeout=settings.webhook_timeout,
    )


def _no_such_route(rest: str, _access: ReadAccess) -> None:
    """404 for an unknown ``/api/...`` path (after the same token check as every API route:
    401 comes first), so it never falls through to the dashboard's pages."""
    raise RequestError(404, f"no API route /api/{rest[:200]}; the routes are listed at /docs")


async def _request_error(_request: Request, exc: RequestError) -> Response:
    return GWJSONResponse({"detail": exc.message}, status_code=exc.status)


async def _database_busy(_request: Request, exc: OperationalError) -> Response:
    """A transient database failure (lock timeout, deadlock, lost connection): retry later."""
    return database_busy(exc)


async def _validation_error(_request: Request, exc: RequestValidationError) -> Response:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()
    )
    return GWJSONResponse({"detail": f"invalid request: {problems}"[:2000]}, status_code=422)
