"""One router per resource; ``api_router`` mounts them all under ``/api/v1``."""

from __future__ import annotations

from fastapi import APIRouter

from gradwatch_server.api.routes import (
    alerts,
    drift,
    health,
    ingest,
    lifecycle,
    runs,
    scalars,
    structure,
)

api_router = APIRouter()
api_router.include_router(ingest.router)
api_router.include_router(runs.router)
api_router.include_router(drift.router)
api_router.include_router(alerts.router)
api_router.include_router(lifecycle.router)
api_router.include_router(scalars.router)
api_router.include_router(structure.router)
api_router.include_router(health.router)
