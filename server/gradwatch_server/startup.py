"""Checks ``gradwatch serve`` makes of its database before opening it for real.

Opening a SQLite file through the server's engine is not harmless: the engine switches it
to WAL mode and migrations add tables, so another application's database, or a damaged
file, would be changed before the first error. :func:`check_database` looks first, with
the standard library's ``sqlite3`` and nothing that writes: the file's header, its tables
(a gradwatch database, an empty one, or another application's), then whether a write
lock can be had (locked by another process, read-only). PostgreSQL is connected to once,
with a short timeout. Each problem is one :class:`ServerConfigError` line naming the file
or URL, the cause and what to do; nothing on disk has changed.

Example::

    check_database("sqlite:////data/gradwatch.db")  # ServerConfigError: ... is locked ...
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import exc
from sqlalchemy.engine import make_url

from gradwatch_server.db import normalize_url, sqlite_file
from gradwatch_server.exceptions import ServerConfigError

SQLITE_HEADER = b"SQLite format 3\x00"
#: seconds to wait for another process's write lock before saying the file is locked
LOCK_WAIT_S = 5.0
#: seconds to wait for PostgreSQL to answer
CONNECT_TIMEOUT_S = 5
#: tables every gradwatch database has
GRADWATCH_TABLES = frozenset({"alembic_version", "runs", "projects", "tokens"})
_NEW_DB = "move it away (gradwatch then starts a new database there) or use another --db"


def check_database(url: str) -> None:
    """``ServerConfigError`` when the database at ``url`` cannot serve; see the module."""
    normal = normalize_url(url)
    path = sqlite_file(normal)
    if path is not None:
        check_sqlite_file(path)
    elif not normal.startswith("sqlite"):
        check_postgres(normal, shown=make_url(url).render_as_string(hide_password=True))


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    from gradwatch_server.migrate import alembic_config

    return {r.revision for r in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def check_sqlite_file(path: Path) -> None:
    """The checks of a SQLite database file (none for a file that does not exist yet)."""
    if not path.exists():
        return
    if not path.is_file():
        raise ServerConfigError(f"database {path} is not a file; {_NEW_DB}")
    try:
        with path.open("rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise ServerConfigError(
            f"cannot read the database {path} ({e.strerror or e}); give this user access "
            "to it or use another --db"
        ) from e
    if not header:
        return  # an empty file: a new database
    if header != SQLITE_HEADER:
        raise ServerConfigError(
            f"database {path} is not a SQLite database (its header is damaged, or it is "
            f"another kind of file); it was left as it is: restore it from a backup, or "
            f"{_NEW_DB}"
        )
    try:
        conn = sqlite3.connect(path, timeout=LOCK_WAIT_S, isolation_level=None)
    except sqlite3.Error as e:
        raise ServerConfigError(_sqlite_problem(path, e)) from e
    try:
        _check_tables(path, conn)
        try:  # a write lock, given back at once: writes nothing
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            raise ServerConfigError(_sqlite_problem(path, e)) from e
    finally:
        conn.close()


def _check_tables(path: Path, conn: sqlite3.Connection) -> None:
    try:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        tables = {str(r[0]) for r in rows}
        revision = None
        if "alembic_version" in tables:
            got = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            revision = None if got is None else str(got[0])
    except sqlite3.Error as e:
        raise ServerConfigError(_sqlite_problem(path, e)) from e
    if not tables or (tables == {"alembic_version"} and revision is None):
        return  # an empty database: gradwatch makes its tables
    if not tables >= GRADWATCH_TABLES:
        listed = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise ServerConfigError(
            f"database {path} belongs to another application (its tables: {listed}), not "
            "gradwatch; it was left as it is: point --db at a gradwatch database or a new "
            "file"
        )
    if revision is not None and revision not in _known_revisions():
        raise ServerConfigError(
            f"database {path} was made by a newer gradwatch (schema revision {revision}); "
            "upgrade gradwatch (pip install -U 'gradwatch[server]') to serve it"
        )


def _sqlite_problem(path: Path, error: sqlite3.Error) -> str:
    """One line for what SQLite said about ``path``."""
    said = str(error)
    code = getattr(error, "sqlite_errorname", "")
    if "locked" in said or code.startswith("SQLITE_BUSY"):
        return (
            f"database {path} is locked by another process (no write lock within "
            f"{LOCK_WAIT_S:g} s); stop the other program using it (another `gradwatch "
            f"serve`? `fuser {path}` names it) or use another --db"
        )
    if "readonly" in said or "read-only" in said or code.startswith("SQLITE_READONLY"):
        return (
            f"database {path} is read-only for this user (SQLite: {said}); give it and its "
            f"folder {path.parent} write access, or use another --db"
        )
    if "unable to open" in said or code.startswith("SQLITE_CANTOPEN"):
        writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
        why = "" if writable else " (it or its folder is not writable: SQLite needs both)"
        return (
            f"cannot open the database {path}{why} (SQLite: {said}); check its and its "
            f"folder's permissions, or use another --db"
        )
    return (
        f"database {path} is damaged (SQLite: {said}); it was left as it is: restore it "
        f"from a backup, or {_NEW_DB}"
    )


def check_postgres(url: str, shown: str) -> None:
    """Connect once with a short timeout; ``ServerConfigError`` naming the URL as
    ``shown`` (without its password) and PostgreSQL's answer."""
    from sqlmodel import create_engine

    engine = create_engine(url, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    try:
        with engine.connect():
            pass
    except exc.DBAPIError as e:
        said = cause(e)
        todo = "start PostgreSQL or fix"
        if "does not exist" in said:
            todo = "create it (`createdb NAME`) or fix"
        elif "authentication" in said or "password" in said:
            todo = "fix the user or password in"
        raise ServerConfigError(
            f"cannot connect to PostgreSQL at {shown} ({said}); {todo} --db / "
            "GRADWATCH_DB (host, port, user, password, database name)"
        ) from e
    finally:
        engine.dispose()


def cause(error: exc.DBAPIError) -> str:
    """The driver's first line of ``error``, without SQLAlchemy's wrapping."""
    text = str(error.orig).strip() or type(error.orig).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines[:2])[:300]


def database_failure(url: str, error: exc.DBAPIError) -> ServerConfigError:
    """One line for a database error while the server starts (migrations, the token
    check) that the checks above did not foresee, e.g. a full disk."""
    shown = make_url(url).render_as_string(hide_password=True)
    said = cause(error)
    hint = "check the database and try again"
    if "full" in said:
        hint = "free disk space where the database lives and start again"
    elif "I/O" in said:
        hint = "check the disk where the database lives (full, failing, or over a size limit)"
    return ServerConfigError(f"cannot start on the database {shown} ({said}); {hint}")


@contextmanager
def undone_if_new(url: str) -> Iterator[None]:
    """When the block fails while starting on a SQLite file that did not exist before
    (migrations on a full disk), remove what the attempt made — the file, its journal and
    WAL files, and the folders made for it — so a failed start changes nothing on disk."""
    path = sqlite_file(normalize_url(url))
    if path is None or path.exists():
        yield
        return
    folders = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    try:
        yield
    except BaseException:
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        for folder in folders:  # the deepest first; one that is not empty stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise
