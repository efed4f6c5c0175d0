"""Idempotent inserts shared by every writer: ``insert_ignore`` and ``ensure_project``.

A leaf of the server's modules (it imports only the tables), so ingest, alerts, groups,
live drift, auth and the spool import all build on it without importing one another.

``run_sql`` and ``insert_rows`` are the hot path of ingest: fixed SQL text run on the
session's own DBAPI connection (inside its transaction and savepoint), skipping
SQLAlchemy's statement construction, cache-key and parameter processing, which cost more
than SQLite's own work per request. They take ``?`` placeholders (rewritten to ``%s`` for
psycopg), plain Python values (int, float, str, bytes, None) and complete rows (every
column given: no Python-side defaults are applied); database errors come out as
SQLAlchemy's exceptions, exactly as from ``session.execute``.

Example::

    insert_ignore(session, RunTag, [{"run_id": "r1", "tag": "baseline"}])
    project_id = ensure_project(session, "default")
    insert_rows(session, "series_blobs", blob_rows)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import exc, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, SQLModel, col

from gradwatch_server.models import Project

# Built once per (dialect, table, returning): an INSERT statement is immutable, and reusing
# it skips its construction and the computing of its cache key on every ingest request.
_STATEMENTS: dict[tuple[str, str, str | None], Any] = {}


_PG_SQL: dict[str, str] = {}
#: ``session.info`` key of the DBAPI connection and dialect of a session whose one
#: transaction is under way (``db.write_session`` sets it): ``run_sql`` then skips
#: ``session.connection()``, SQLAlchemy's bookkeeping of about 30 µs a statement
PINNED = "gradwatch_pinned_connection"
_PROJECT_ID = "SELECT id FROM projects WHERE name = ?"
# rows per multi-row VALUES statement: 4 columns × 500 stays far below SQLite's 32,766
# variables and PostgreSQL's 65,535 parameters
VALUES_ROWS = 500


def run_sql(
    session: Session, sql: str, params: Sequence[Any] = (), *, many: bool = False
) -> list[tuple[Any, ...]]:
    """Run ``sql`` (``?`` placeholders) on the session's connection; its result rows.

    ``many``: ``params`` is a list of parameter tuples (``executemany``; no rows back).
    """
    pinned = session.info.get(PINNED)
    if pinned is not None:
        dbapi, dialect = pinned
    else:
        conn = session.connection()  # begins the transaction / savepoint when needed
        dbapi, dialect = conn.connection, conn.dialect
    if dialect.name == "postgresql":
        text = _PG_SQL.get(sql)
        if text is None:
            text = _PG_SQL[sql] = sql.replace("?", "%s")
    else:
        text = sql
    cursor = dbapi.cursor()
    try:
        if many:
            cursor.executemany(text, params)
            return []
        cursor.execute(text, params)
        return list(cursor.fetchall()) if cursor.description is not None else []
    except dialect.loaded_dbapi.Error as e:
        raise exc.DBAPIError.instance(
            sql, None, e, dialect.loaded_dbapi.Error, hide_parameters=True, dialect=dialect
        ) from e
    finally:
        cursor.close()


def insert_rows(session: Session, table: str, rows: list[dict[str, Any]]) -> None:
    """``INSERT ... ON CONFLICT DO NOTHING`` of complete rows (see the module docstring)."""
    by_columns: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        by_columns.setdefault(tuple(row), []).append(tuple(row.values()))
    for columns, values in by_columns.items():
        run_sql(session, insert_sql(table, columns, 1), values, many=True)


def insert_returning(
    session: Session, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]], key: str
) -> list[Any]:
    """``INSERT ... ON CONFLICT DO NOTHING RETURNING key`` of ``rows``: the inserted keys."""
    out: list[Any] = []
    for i in range(0, len(rows), VALUES_ROWS):
        part = rows[i : i + VALUES_ROWS]
        sql = insert_sql(table, columns, len(part)) + f" RETURNING {key}"
        out += [r[0] for r in run_sql(session, sql, [v for row in part for v in row])]
    return out


_INSERT_SQL: dict[tuple[str, tuple[str, ...], int], str] = {}


def insert_sql(table: str, columns: tuple[str, ...], count: int) -> str:
    """``INSERT INTO table (columns) VALUES (?, ...), ... ON CONFLICT DO NOTHING`` with
    ``count`` rows of placeholders (cached)."""
    sql = _INSERT_SQL.get((table, columns, count))
    if sql is None:
        one = "(" + ", ".join("?" * len(columns)) + ")"
        sql = (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
            + ", ".join([one] * count)
            + " ON CONFLICT DO NOTHING"
        )
        if len(_INSERT_SQL) < 4096:
            _INSERT_SQL[(table, columns, count)] = sql
    return sql


def ensure_project(session: Session, name: str) -> int:
    """The id of project ``name``, creating it if needed (safe under concurrency)."""
    found = run_sql(session, _PROJECT_ID, (name,))
    if found:
        return int(found[0][0])
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
