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
from sqlmodel import Session

from gradwatch.contract import DEFAULT_PROJECT
from gradwatch.server.api.deps import SettingsDep, WriteAccess
from gradwatch.server.auth import Access
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
from gradwatch.server.jsonresp import GWJSONResponse
from gradwatch.server.schemas import IngestReply, error_replies
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
    return ingest_frames(session, run_id, parsed, project)


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
    """Store a batch of frames of one run; replays are counted as ``duplicates``."""
    run_id = check_run_id(x_gradwatch_run)
    check_schema(x_gradwatch_schema)
    if content_type and content_type.split(";")[0].strip().lower() not in CONTENT_TYPES:
        raise RequestError(
            415, f"content type {content_type[:60]!r} not accepted; use {FRAME_CONTENT_TYPE}"
        )
    body = await read_body(request, settings.max_body_bytes)
    job = IngestJob(
        run_id,
        len(body),
        prepare=lambda: parse_frames(run_id, decode_body(body)),
        store=lambda session, parsed: store_in(session, access, run_id, parsed),
    )
    result: IngestResult = await asyncio.wrap_future(ingest_writer(request).submit(job))
    return GWJSONResponse(
        {"run": result.run, "accepted": result.accepted, "duplicates": result.duplicates}
    )
