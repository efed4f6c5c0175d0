"""``GET /api/v1/health``: liveness, version and schema (no token needed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gradwatch._version import __version__
from gradwatch.core.wire import SCHEMA_VERSION
from gradwatch_server.api.deps import PUBLIC
from gradwatch_server.schemas import HealthReply

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthReply, dependencies=PUBLIC)
def health() -> dict[str, Any]:
    """Always 200 while the server runs."""
    return {"status": "ok", "version": __version__, "schema": SCHEMA_VERSION}
