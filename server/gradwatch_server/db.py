"""Database engines and sessions, from a URL; SQLite tuned for concurrent writers.

SQLite runs in WAL mode with a busy timeout, and write transactions start with
``BEGIN IMMEDIATE``: a deferred transaction that reads and then writes can fail at once
with "database is locked" when another writer got there first, whatever the timeout, so
writers take the lock up front and wait for it instead. A new SQLite file gets pages of
``PAGE_SIZE`` (32 KiB, not SQLite's 4 KiB): ingest stores blobs of a few to a few tens of
KB, which on 4 KiB pages become chains of overflow pages, each page a WAL frame to write
at commit and to copy at checkpoint; on 32 KiB pages most blobs fit in one page, the
writer thread spends about a fifth less time per request and, no longer the bottleneck,
lets a 2-core server take about 1,000 live runs instead of 700-800 (``docs/server.md``). An
existing file keeps the page size it was made with: SQLite changes it only by VACUUM,
outside WAL mode, which ``convert_pages`` does with the server stopped (``gradwatch
serve --convert-pages``). PostgreSQL URLs use psycopg 3.

Example::

    engine = make_engine("sqlite:////tmp/gw.db")
    migrate(engine)
    with write_session(engine) as session:
        ...
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.pool import StaticPool
from sqlmodel import Session, create_engine

from gradwatch_server.exceptions import ServerConfigError
from gradwatch_server.store import PINNED

BUSY_TIMEOUT_MS = 30_000
#: bytes per page of a new SQLite database file (a no-op on an existing one)
PAGE_SIZE = 32768
_IMMEDIATE = "gradwatch_immediate"


def normalize_url(url: str) -> str:
    """Map ``postgresql://`` (and ``postgres://``) to the psycopg 3 driver; check the scheme."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    try:
        parsed = make_url(url)
    except Exception as e:
        raise ServerConfigError(
            f"cannot parse database URL {url!r} ({e}); use sqlite:///PATH or "
            "postgresql://USER@HOST/DB"
        ) from e
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ServerConfigError(
            f"unsupported database {parsed.get_backend_name()!r} in {url!r}; "
            "gradwatch supports sqlite:///PATH and postgresql://USER@HOST/DB"
        )
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, *, pool_size: int | None = None) -> Engine:
    """An engine for ``url``; creates the SQLite file's folder if needed. ``pool_size``:
    at most that many connections (a SQLite file's default pool otherwise)."""
    url = normalize_url(url)
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8)
    path = sqlite_file(make_url(url))
    in_memory = path is None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 30}}
    if in_memory:
        kwargs["poolclass"] = StaticPool
    elif pool_size is not None:
        kwargs.update(pool_size=pool_size, max_overflow=0)
    engine = create_engine(url, **kwargs)
    _tune_sqlite(engine, wal=not in_memory)
    return engine


def _tune_sqlite(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see "begin" below)
        cursor = dbapi_conn.cursor()
        if wal:  # page_size first: WAL mode fixes the page size of a new file
            cursor.execute(f"PRAGMA page_size={PAGE_SIZE}")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_IMMEDIATE, False)
        sql = "BEGIN IMMEDIATE" if immediate else "BEGIN"
        dialect = conn.dialect
        try:  # on the DBAPI connection: exec_driver_sql costs ~0.1 ms of Python per BEGIN
            conn.connection.driver_connection.execute(sql)  # type: ignore[union-attr]
        except dialect.loaded_dbapi.Error as e:  # as SQLAlchemy's, like any statement's
            raise exc.DBAPIError.instance(
                sql, None, e, dialect.loaded_dbapi.Error, hide_parameters=True, dialect=dialect
            ) from e


def is_postgres(engine: Engine) -> bool:
    """True when ``engine`` talks to PostgreSQL."""
    return engine.dialect.name == "postgresql"


_WRITER_ATTR = "_gradwatch_writer"


@contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """A session whose transaction takes the write lock at BEGIN (SQLite) and commits on exit."""
    writer: Engine | None = getattr(engine, _WRITER_ATTR, None)
    if writer is None:  # built once per engine (execution_options copies the engine)
        writer = engine.execution_options(**{_IMMEDIATE: True})
        setattr(engine, _WRITER_ATTR, writer)
    with Session(writer) as session, session.begin():
        conn = session.connection()
        session.info[PINNED] = (conn.connection, conn.dialect)
        try:
            yield session
        finally:
            session.info.pop(PINNED, None)


@contextmanager
def read_session(engine: Engine) -> Iterator[Session]:
    """A plain session for queries."""
    with Session(engine) as session:
        yield session


@dataclass(frozen=True)
class PageConversion:
    """What :func:`convert_pages` did: page sizes and file sizes before and after."""

    path: Path
    old_page_size: int
    new_page_size: int
    bytes_before: int
    bytes_after: int
    seconds: float

    @property
    def changed(self) -> bool:
        """False when the database had ``PAGE_SIZE`` pages already (nothing was done)."""
        return self.old_page_size != self.new_page_size


def sqlite_file(url: str | URL) -> Path | None:
    """The file of a SQLite URL (an engine's ``url`` too); None for PostgreSQL and for a
    database in memory."""
    parsed = url if isinstance(url, URL) else make_url(normalize_url(url))
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(str(parsed.database)).expanduser()


def page_size_of(path: Path) -> int:
    """The page size of an existing SQLite file (read from its header, no lock taken)."""
    with path.open("rb") as f:
        header = f.read(18)
    if not header:
        raise ServerConfigError(
            f"{path} is empty: the server gives it {PAGE_SIZE // 1024} KiB pages when it "
            "creates its tables"
        )
    if len(header) < 18 or not header.startswith(b"SQLite format 3\x00"):
        raise ServerConfigError(f"{path} is not a SQLite database")
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def convert_pages(url: str) -> PageConversion:
    """Rewrite an existing SQLite database with ``PAGE_SIZE`` pages (VACUUM, outside WAL
    mode), then put it back in WAL mode; a no-op when it has them already.

    The server must be stopped: SQLite leaves WAL mode only with no other connection
    open, and this refuses (``ServerConfigError``, nothing changed) when one is. It also
    refuses when the disk lacks room for the rewrite (VACUUM writes a temporary copy and a
    rollback journal, each up to the database's size). Should VACUUM fail (a full disk,
    an interruption), SQLite rolls it back: the database keeps its old pages.
    """
    path = sqlite_file(url)
    if path is None:
        raise ServerConfigError(
            "--convert-pages is for a SQLite database file; PostgreSQL sizes its own pages"
        )
    if not path.is_file():
        raise ServerConfigError(f"no database at {path}: nothing to convert")
    old = page_size_of(path)
    before = _on_disk(path)
    if old == PAGE_SIZE:
        return PageConversion(path, old, old, before, before, 0.0)
    need = 2 * before
    free = shutil.disk_usage(path.parent).free
    if free < need:
        raise ServerConfigError(
            f"not enough free disk to rewrite {path}: it needs about {need / 1e6:,.0f} MB "
            f"(twice the database) in {path.parent}, which has {free / 1e6:,.0f} MB"
        )
    started = time.monotonic()
    conn = sqlite3.connect(path, isolation_level=None, timeout=2.0)
    try:
        try:
            mode = conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        except sqlite3.OperationalError as e:
            raise ServerConfigError(
                f"{path} is in use ({e}): stop `gradwatch serve` and anything else that has "
                "it open, then run this again; nothing was changed"
            ) from e
        if str(mode).lower() != "delete":
            raise ServerConfigError(
                f"{path} is in use (it stays in {mode} mode): stop `gradwatch serve` and "
                "anything else that has it open, then run this again; nothing was changed"
            )
        try:
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
            conn.execute("VACUUM")
        except sqlite3.Error as e:
            raise ServerConfigError(
                f"rewriting {path} failed ({e}); SQLite rolled it back, so it keeps its "
                f"{old:,}-byte pages"
            ) from e
        finally:
            with contextlib.suppress(sqlite3.Error):  # else the next engine sets WAL
                conn.execute("PRAGMA journal_mode=WAL")
        new = int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    if new != PAGE_SIZE:
        raise ServerConfigError(f"{path} still has {new:,}-byte pages after VACUUM")
    return PageConversion(path, old, new, before, _on_disk(path), time.monotonic() - started)


def _on_disk(path: Path) -> int:
    """Bytes of a SQLite database and its WAL file."""
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
