"""The server's one entry point for the collector's commands (``serve``, ``demo``,
``runs``, ``findings``, the pandas reader's local run list): serve, create a token, list
runs locally, read the server-made findings of a spooled run, create the demo's alert rule.
Nothing else of ``gradwatch_server`` is imported by the collector (tests/test_architecture.py).

Example::

    serve(Settings.from_env(host="127.0.0.1", port=8765))
"""

from __future__ import annotations

import os
import sys
from typing import Any

from sqlalchemy.exc import DBAPIError

from gradwatch_server.auth import count_tokens, create_token, list_tokens, revoke_token
from gradwatch_server.db import (
    PAGE_SIZE,
    convert_pages,
    make_engine,
    page_size_of,
    read_session,
    sqlite_file,
    write_session,
)
from gradwatch_server.exceptions import ServerConfigError, ServerError
from gradwatch_server.ingest.spool_import import SpoolImporter
from gradwatch_server.migrate import migrate
from gradwatch_server.read.runs import list_runs
from gradwatch_server.read.status import StatusPolicy
from gradwatch_server.settings import (
    DB_FILE,
    PREPARE_HELPER_ENV,
    Settings,
    default_db_url,
    is_loopback,
)
from gradwatch_server.startup import check_database, database_failure, undone_if_new

__all__ = [
    "DB_FILE",
    "ServerError",
    "Settings",
    "alert_rule",
    "check_bind",
    "check_database",
    "convert_pages",
    "create_app",
    "default_db_url",
    "local_runs",
    "new_token",
    "revoke",
    "serve",
    "server_findings",
    "tokens",
]


def check_bind(settings: Settings) -> None:
    """Refuse a non-loopback bind while no token exists (anyone could read and write), and
    a server that requires tokens while none exists (no one could)."""
    if is_loopback(settings.host) and not settings.require_tokens:
        return
    engine = make_engine(settings.db_url)
    try:
        migrate(engine)
        with read_session(engine) as session:
            tokens = count_tokens(session)
    finally:
        engine.dispose()
    if tokens == 0 and is_loopback(settings.host):
        raise ServerConfigError(
            "refusing to start: tokens are required (--require-tokens) but none exists; "
            "create them first, e.g. `gradwatch serve --create-token PROJECT --scope read` "
            "with the same --db"
        )
    if tokens == 0:
        raise ServerConfigError(
            f"refusing to listen on {settings.host}: a server reachable from other machines "
            "needs API tokens. Create them first, e.g. `gradwatch serve --create-token "
            "PROJECT --scope write` (collectors) and `--scope read` (dashboards), with the "
            "same --db, or bind to 127.0.0.1"
        )


def serve(settings: Settings) -> None:
    """Run the API with uvicorn until interrupted."""
    import uvicorn  # the web stack only when serving (`gradwatch runs` needs none of it)

    from gradwatch_server.app import create_app

    check_database(settings.db_url)  # before anything opens it: one clear line, no change
    try:
        check_bind(settings)
        hint = small_pages_hint(settings)
        if hint:
            print(f"gradwatch serve: {hint}", file=sys.stderr)
        if PREPARE_HELPER_ENV not in os.environ:  # a server: its helper starts with it
            settings = settings.with_(prepare_helper="on")
        with undone_if_new(settings.db_url):
            app = create_app(settings)
    except DBAPIError as e:  # what the checks could not foresee (a full disk)
        raise database_failure(settings.db_url, e) from e
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")


def small_pages_hint(settings: Settings) -> str | None:
    """One sentence when the SQLite database has pages smaller than ``PAGE_SIZE`` (made
    by an earlier gradwatch): what it costs and the command that converts it."""
    path = sqlite_file(settings.db_url)
    if path is None or not path.is_file():
        return None
    try:
        size = page_size_of(path)
    except (OSError, ServerConfigError):
        return None
    if size >= PAGE_SIZE:
        return None
    return (
        f"this database has {size // 1024} KiB pages (made by an earlier gradwatch), which "
        f"hold fewer live runs than {PAGE_SIZE // 1024} KiB ones; to convert it, stop the "
        "server and run `gradwatch serve --convert-pages` with the same --db"
    )


def new_token(settings: Settings, project: str, scope: str) -> str:
    """Create a token in the settings' database and return its secret."""
    engine = make_engine(settings.db_url)
    try:
        migrate(engine)
        with write_session(engine) as session:
            return create_token(session, project=project, scope=scope)
    finally:
        engine.dispose()


def tokens(settings: Settings, project: str | None = None) -> list[dict[str, Any]]:
    """The tokens in the settings' database (no secrets: they are never stored)."""
    engine = make_engine(settings.db_url)
    try:
        migrate(engine)
        with read_session(engine) as session:
            return list_tokens(session, project)
    finally:
        engine.dispose()


def revoke(settings: Settings, which: str) -> dict[str, Any]:
    """Revoke a token by id or secret; ``ServerConfigError`` if there is none."""
    engine = make_engine(settings.db_url)
    try:
        migrate(engine)
        with write_session(engine) as session:
            return revoke_token(session, which)
    except LookupError as e:
        raise ServerConfigError(str(e)) from e
    finally:
        engine.dispose()


def local_runs(settings: Settings, project: str | None) -> list[dict[str, Any]]:
    """Runs from the local database, after importing the data directory's spools."""
    engine = make_engine(settings.db_url)
    try:
        migrate(engine)
        SpoolImporter(engine, settings.data_dir, 0.0).import_all()
        with read_session(engine) as session:
            policy = StatusPolicy(settings.stalled_after, settings.crashed_after)
            runs, _ = list_runs(session, policy=policy, project=project, limit=1 << 30)
        return [r.model_dump() for r in runs]
    finally:
        engine.dispose()


def create_app(settings: Settings) -> Any:
    """The ASGI app (API and dashboard) for ``settings``, for a caller that runs it."""
    from gradwatch_server.app import create_app as make

    return make(settings)


def server_findings(db_url: str, run_id: str) -> list[dict[str, Any]]:
    """The findings the server made of ``run_id`` (drift, envelopes) in the database at
    ``db_url``; none from an older or foreign database."""
    from sqlalchemy.exc import SQLAlchemyError

    from gradwatch_server.read import runs

    engine = make_engine(db_url)
    try:
        with read_session(engine) as session:
            found, _ = runs.findings(session, run_id=run_id, limit=1 << 20)
    except SQLAlchemyError:  # an older or foreign database: the spool alone still answers
        return []
    finally:
        engine.dispose()
    return [{**f.model_dump(), "run": run_id} for f in found if f.source == "server"]


def alert_rule(db_url: str, project_name: str) -> None:
    """Create ``project_name``'s log-only alert rule (warnings and errors, no webhook)
    unless one exists."""
    import time

    from sqlalchemy import select
    from sqlmodel import col

    from gradwatch_server.models import AlertRule
    from gradwatch_server.store import ensure_project

    engine = make_engine(db_url)
    try:
        migrate(engine)
        with write_session(engine) as session:
            project = ensure_project(session, project_name)
            rules = select(AlertRule).where(
                col(AlertRule.project_id) == project, col(AlertRule.webhook_url).is_(None)
            )
            if session.execute(rules).first() is None:
                rule = AlertRule(project_id=project, min_severity="warning", created_at=time.time())
                session.add(rule)
    finally:
        engine.dispose()
