"""Idempotent inserts shared by every writer: ``insert_ignore`` and ``ensure_project``.

A leaf of the server's modules (it imports only the tables), so ingest, alerting, groups,
live drift, auth and the spool import all build on it without importing one another.

Example::

    insert_ignore(session, RunTag, [{"run_id": "r1", "tag": "baseline"}])
    project_id = ensure_project(session, "default")
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, SQLModel, col

from gradwatch.server.models import Project

# Built once per (dialect, table, returning): an INSERT statement is immutable, and reusing
# it skips its construction and the computing of its cache key on every ingest request.
_STATEMENTS: dict[tuple[str, str, str | None], Any] = {}


def ensure_project(session: Session, name: str) -> int:
    """The id of project ``name``, creating it if needed (safe under concurrency)."""
    insert_ignore(session, Project, [{"name": name}])
    return int(
        session.execute(select(col(Project.id)).where(col(Project.name) == name)).scalar_one()
    )


def insert_ignore(
    session: Session,
    model: type[SQLModel],
    rows: list[dict[str, Any]],
    returning: str | None = None,
) -> list[Any]:
    """``INSERT ... ON CONFLICT DO NOTHING`` (SQLite and PostgreSQL); inserted keys if asked."""
    name = str(model.__tablename__)
    dialect = session.get_bind().dialect.name
    key = (dialect, name, returning)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        table = SQLModel.metadata.tables[name]
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        stmt = insert(table).on_conflict_do_nothing()
        if returning is not None:
            stmt = stmt.returning(table.c[returning])
        _STATEMENTS[key] = stmt
    if returning is None:
        session.execute(stmt, rows)
        return []
    return list(session.execute(stmt, rows).scalars())
