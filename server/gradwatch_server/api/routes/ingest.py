"""``POST /api/v1/ingest``: the collector's batches of frames (protocol in
gradwatch.transport.sender).

Checks, in order, each with a clear 4xx: run id header (400), schema version header (400),
content type (415), body size (413), frame integrity (400), token (401/403), record
contents (422), run (404: a run of a project this token cannot see). A batch is stored
all or nothing, exactly once per ``(run, seq)``. Decoding, validation and storing run on
the app's ingest writer thread, which commits many requests per transaction and answers
each after the commit (:mod:`gradwatch_server.ingest.batch_writer`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from gradwatch.core.wire import FRAME_CONTENT_TYPE, SCHEMA_VERSION
from gradwatch_server.api.deps import SettingsDep, WriteAccess, write_access
from gradwatch_server.auth import OPEN, Access
from gradwatch_server.exceptions import RequestError
from gradwatch_server.guards.bodylimit import INGEST_PATH, BodyRefusedError, read_limited, refuse
from gradwatch_server.ingest.batch_writer import IngestJob, IngestWriter
from gradwatch_server.ingest.frame_rows import FrameRows
from gradwatch_server.ingest.frame_store import (
    IngestResult,
    authorised_project,
    check_run_id,
    ingest_frames,
    start_project,
    stored_project,
)
from gradwatch_server.ingest.prepare_helper import prepare_body
from gradwatch_server.jsonresp import GWJSONResponse, database_busy, dumps
from gradwatch_server.schemas import IngestReply, error_replies
from gradwatch_server.settings import Settings

router = APIRouter(tags=["ingest"])
CONTENT_TYPES = (FRAME_CONTENT_TYPE, "application/octet-stream")
_ERRORS = error_replies(400, 401, 403, 404, 413, 415, 422)
_BODY = {
    "requestBody": {
        "required": True,
        "content": {FRAME_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}},
    }
}


def check_schema(value: str | None) -> None:
    """400 unless the client speaks our wire schema version."""
    if value != str(SCHEMA_VERSION):
        got = "no X-Gradwatch-Schema header" if value is None else f"schema {value[:20]!r}"
        raise RequestError(
            400,
            f"this server speaks gradwatch wire schema {SCHEMA_VERSION}, the request has {got}; "
            "upgrade the older of collector and server so that both use the same schema",
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or 413 as soon as it exceeds ``limit`` bytes."""
    too_big = RequestError(
        413, f"request body over the {limit}-byte limit; send smaller batches of frames"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        parts.append(chunk)
    return b"".join(parts)


def request_job(run_id: str, body: bytes, access: Access) -> IngestJob:
    """The writer's job for one checked request body of ``run_id``: prepared by
    ``prepare_body`` (on the prepare thread or in its helper process), stored by
    :func:`store_in` (alone or in a batch of its group)."""
    return IngestJob(
        run_id,
        len(body),
        prepare=lambda: prepare_body(run_id, body),
        store=lambda session, parsed: store_in(session, access, run_id, parsed),
        body=body,
        access=access,
    )


def store_in(
    session: Session, access: Access, run_id: str, parsed: list[FrameRows]
) -> IngestResult:
    """Authorise and store one validated batch inside the writer's transaction."""
    stored = stored_project(session, run_id)
    project = authorised_project(access, run_id, start_project(parsed), stored)
    return ingest_frames(session, run_id, parsed, project, run_exists=stored is not None)


def ingest_writer(request: Request) -> IngestWriter:
    """The app's group-commit writer (see gradwatch_server.ingest.batch_writer)."""
    writer: IngestWriter = request.app.state.ingest_writer
    return writer


@router.post(
    "/ingest",
    response_model=IngestReply,
    responses=_ERRORS,
    openapi_extra=_BODY,
)
async def ingest(
    request: Request,
    settings: SettingsDep,
    access: WriteAccess,
    x_gradwatch_run: Annotated[str | None, Header()] = None,
    x_gradwatch_schema: Annotated[str | None, Header()] = None,
    content_type: Annotated[str | None, Header()] = None,
) -> GWJSONResponse:
    """Store a batch of frames of one run; replays are counted as ``duplicates``.

    (The app answers this route with :class:`IngestFront`, the same checks and replies
    before FastAPI's middleware, routing and dependencies; this declaration documents it,
    and answers a request with a query string.)
    """
    return await handle_ingest(
        request, settings, access, x_gradwatch_run, x_gradwatch_schema, content_type
    )


async def handle_ingest(
    request: Request,
    settings: Settings,
    access: Access,
    run_header: str | None,
    schema_header: str | None,
    content_type: str | None,
) -> GWJSONResponse:
    """The checks after the token's, then the writer: one reply (raises RequestError)."""
    run_id = check_request(run_header, schema_header, content_type)
    body = await read_body(request, settings.max_body_bytes)
    status, content, headers = await store_body(
        ingest_writer(request), settings, access, run_id, body
    )
    return GWJSONResponse(content, status_code=status, headers=headers)


def check_request(
    run_header: str | None, schema_header: str | None, content_type: str | None
) -> str:
    """The run id, after the run id, schema and content type checks (raises RequestError)."""
    run_id = check_run_id(run_header)
    check_schema(schema_header)
    if content_type and content_type.split(";")[0].strip().lower() not in CONTENT_TYPES:
        raise RequestError(
            415, f"content type {content_type[:60]!r} not accepted; use {FRAME_CONTENT_TYPE}"
        )
    return run_id


async def store_body(
    writer: IngestWriter, settings: Settings, access: Access, run_id: str, body: bytes
) -> tuple[int, dict[str, Any], dict[str, str] | None]:
    """Hand a checked request to the writer: (status, JSON content, headers) of the reply,
    a 503 when the writer's backlog is full (raises RequestError from the writer)."""
    if writer.backlog() > settings.ingest_backlog_bytes:
        wait = writer.retry_after()
        detail = (
            f"the server is storing {writer.backlog() / 1e6:.0f} MB of queued "
            f"ingest requests; retry in {wait} s (nothing of this request was stored)"
        )
        return 503, {"detail": detail}, {"Retry-After": str(wait)}
    job = request_job(run_id, body, access)
    result: IngestResult = await writer.store(job)
    return (
        200,
        {"run": result.run, "accepted": result.accepted, "duplicates": result.duplicates},
        None,
    )


def _write_access(settings: Settings, engine: Engine, authorization: str | None) -> Access:
    """The route's ``WriteAccess`` dependency, called directly (a read session, a thread)."""
    if not settings.require_tokens:
        return OPEN  # what write_access gives without touching its session
    with Session(engine) as session:
        return write_access(settings, session, authorization)


_NEEDED = (b"authorization", b"x-gradwatch-run", b"x-gradwatch-schema", b"content-type")


class IngestFront:
    """ASGI, outermost: ``POST /api/v1/ingest`` (without a query string) answered before
    FastAPI's middleware stack, routing and dependency resolution, which cost more CPU
    per request than storing it. The same checks in the same order as the stack and the
    route: the body limit's (413 over the limit, 408 when the body does not arrive in
    time: :mod:`gradwatch_server.guards.bodylimit`), the token (401/403), then the route's
    (:func:`check_request`, the writer's backlog, the writer), with the same replies: a
    RequestError as its status and detail, a database failure as 503 (the app's
    handlers); anything else is raised to the server's 500. The success reply is sent as
    two ASGI messages with the headers ``GWJSONResponse`` sends. Every other request goes
    to the app's stack.
    """

    def __init__(self, app: ASGIApp, state: Any) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer an ingest request, or hand any other request on."""
        if (
            scope["type"] != "http"
            or scope["path"] != INGEST_PATH
            or scope["method"] != "POST"
            or scope.get("query_string")
        ):
            await self.app(scope, receive, send)
            return
        settings: Settings = self.state.settings
        found: dict[bytes, bytes] = {}
        declared = b""
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value  # the last, as the body limit reads it
            elif name in _NEEDED and name not in found:
                found[name] = value  # the first, as Starlette's Headers.get
        try:
            body = await read_limited(receive, declared, settings)
        except BodyRefusedError as e:
            await refuse(scope, receive, send, e.status, e.message)
            return
        try:
            access = await self._access(settings, _latin(found.get(b"authorization")))
            run_id = check_request(
                _latin(found.get(b"x-gradwatch-run")),
                _latin(found.get(b"x-gradwatch-schema")),
                _latin(found.get(b"content-type")),
            )
            if len(body) > settings.max_body_bytes:  # what the route's read_body refuses
                raise RequestError(
                    413,
                    f"request body over the {settings.max_body_bytes}-byte limit; "
                    "send smaller batches of frames",
                )
            status, content, headers = await store_body(
                self.state.ingest_writer, settings, access, run_id, body
            )
        except RequestError as e:
            response = GWJSONResponse({"detail": e.message}, status_code=e.status)
        except OperationalError as e:
            response = database_busy(e)
        else:
            if status == 200:
                reply = dumps(content)
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-length", str(len(reply)).encode("ascii")),
                            (b"content-type", b"application/json"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": reply})
                return
            response = GWJSONResponse(content, status_code=status, headers=headers)
        await response(scope, receive, send)

    async def _access(self, settings: Settings, authorization: str | None) -> Access:
        if settings.require_tokens:
            return await run_in_threadpool(
                _write_access, settings, self.state.engine, authorization
            )
        return _write_access(settings, self.state.engine, authorization)


def _latin(value: bytes | None) -> str | None:
    """A header value as Starlette decodes it."""
    return None if value is None else value.decode("latin-1")
