"""``POST /api/v1/ingest``: the collector's batches of frames (protocol in
gradwatch.transport.sender).

Checks, in order, each with a clear 4xx: run id header (400), schema version header (400),
content type (415), body size (413), frame integrity (400), token (401/403), record
contents (422), run (404: a run of a project this token cannot see). A batch is stored
all or nothing, exactly once per ``(run, seq)``. Decoding, validation and storing run on
the app's ingest writer thread, which commits many requests per transaction and answers
each after the commit (:mod:`gradwatch.server.ingest_writer`).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, Request
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from gradwatch.contract import DEFAULT_PROJECT
from gradwatch.server.api.deps import SettingsDep, WriteAccess, write_access
from gradwatch.server.auth import OPEN, Access
from gradwatch.server.bodylimit import INGEST_PATH
from gradwatch.server.exceptions import RequestError
from gradwatch.server.frame_ingest import (
    IngestResult,
    check_run_id,
    ingest_frames,
    parse_frames,
    start_project,
    stored_project,
)
from gradwatch.server.frame_rows import FrameRows
from gradwatch.server.ingest_writer import IngestJob, IngestWriter
from gradwatch.server.jsonresp import GWJSONResponse, database_busy
from gradwatch.server.schemas import IngestReply, error_replies
from gradwatch.server.settings import Settings
from gradwatch.wire import FRAME_CONTENT_TYPE, MAGIC, SCHEMA_VERSION, Frame, scan_frames

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


def decode_body(body: bytes) -> list[Frame]:
    """The frames of a body, or 400 saying where and how it is damaged."""
    if not body:
        raise RequestError(400, "empty body: send one or more frames (see gradwatch.wire)")
    scan = scan_frames(body, resync=False)
    if scan.corrupt_frames or scan.torn_tail_bytes:
        at = scan.end_offset
        if body[at : at + 2] == MAGIC and len(body) > at + 2 and body[at + 2] != SCHEMA_VERSION:
            why = f"has schema version {body[at + 2]}, this server reads {SCHEMA_VERSION}"
        elif scan.torn_tail_bytes:
            why = f"is incomplete ({scan.torn_tail_bytes} bytes, cut short)"
        else:
            why = "is damaged (bad magic, kind, length, CRC or payload)"
        raise RequestError(
            400, f"the frame at byte {at} {why}; no frame of this request was stored"
        )
    return scan.frames


def store_in(
    session: Session, access: Access, run_id: str, parsed: list[FrameRows]
) -> IngestResult:
    """Authorise and store one validated batch inside the writer's transaction."""
    named = start_project(parsed)
    stored = stored_project(session, run_id)
    if stored is not None and not access.sees(stored):  # says nothing of its project
        raise RequestError(
            404, f"no run {run_id!r} that this token may write to; use another run id"
        )
    project = named or stored or access.project or DEFAULT_PROJECT
    access.check(project, "write")
    if stored is not None and stored != project:
        access.check(stored, "write")
    return ingest_frames(session, run_id, parsed, project, run_exists=stored is not None)


def ingest_writer(request: Request) -> IngestWriter:
    """The app's group-commit writer (see gradwatch.server.ingest_writer)."""
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

    (The app answers this route with :class:`IngestFastPath`, the same checks and
    replies without FastAPI's routing and dependencies; this declaration documents it.)
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
    run_id = check_run_id(run_header)
    check_schema(schema_header)
    if content_type and content_type.split(";")[0].strip().lower() not in CONTENT_TYPES:
        raise RequestError(
            415, f"content type {content_type[:60]!r} not accepted; use {FRAME_CONTENT_TYPE}"
        )
    body = await read_body(request, settings.max_body_bytes)
    writer = ingest_writer(request)
    if writer.backlog() > settings.ingest_backlog_bytes:
        wait = writer.retry_after()
        return GWJSONResponse(
            {
                "detail": f"the server is storing {writer.backlog() / 1e6:.0f} MB of queued "
                f"ingest requests; retry in {wait} s (nothing of this request was stored)"
            },
            status_code=503,
            headers={"Retry-After": str(wait)},
        )
    job = IngestJob(
        run_id,
        len(body),
        prepare=lambda: parse_frames(run_id, decode_body(body)),
        store=lambda session, parsed: store_in(session, access, run_id, parsed),
    )
    result: IngestResult = await asyncio.wrap_future(writer.submit(job))
    return GWJSONResponse(
        {"run": result.run, "accepted": result.accepted, "duplicates": result.duplicates}
    )


def _write_access(settings: Settings, engine: Engine, authorization: str | None) -> Access:
    """The route's ``WriteAccess`` dependency, called directly (a read session, a thread)."""
    if not settings.require_tokens:
        return OPEN  # what write_access gives without touching its session
    with Session(engine) as session:
        return write_access(settings, session, authorization)


class IngestFastPath:
    """ASGI: ``POST /api/v1/ingest`` answered without FastAPI's routing, dependency
    resolution (sync dependencies run on worker threads) and response model, which cost
    more CPU per request than the storing itself. The same checks in the same order
    (token, then the route's), the same replies: RequestError as its status and detail,
    a database failure as 503 (the app's handlers), anything else raised to the app's
    500. Installed inside the body limit and the NUL guard; other requests pass through.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer an ingest request, or hand any other request on."""
        if scope["type"] != "http" or scope["path"] != INGEST_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        state = request.app.state
        settings: Settings = state.settings
        headers = request.headers
        try:
            authorization = headers.get("authorization")
            if settings.require_tokens:
                access = await run_in_threadpool(
                    _write_access, settings, state.engine, authorization
                )
            else:
                access = _write_access(settings, state.engine, authorization)
            response = await handle_ingest(
                request,
                settings,
                access,
                headers.get("x-gradwatch-run"),
                headers.get("x-gradwatch-schema"),
                headers.get("content-type"),
            )
        except RequestError as e:
            response = GWJSONResponse({"detail": e.message}, status_code=e.status)
        except OperationalError as e:
            response = database_busy(e)
        await response(scope, receive, send)
