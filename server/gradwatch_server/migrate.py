"""Applies the Alembic migrations shipped in the package; called by ``create_app``.

Several server processes may start at once on one PostgreSQL: a session-level advisory
lock makes them migrate one after the other (the later ones find nothing to do).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from gradwatch_server.db import is_postgres

MIGRATIONS = Path(__file__).with_name("migrations")
_LOCK_KEY = 0x67726164  # "grad"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def migrate(engine: Engine) -> None:
    """Bring the database schema to the newest revision."""
    with engine.connect() as conn:
        if is_postgres(engine):
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_KEY})
            conn.commit()
        try:
            command.upgrade(alembic_config(conn), "head")
            conn.commit()
        finally:
            if is_postgres(engine):
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_KEY})
                conn.commit()
