"""Alembic environment: runs on the connection that ``gradwatch_server.migrate`` passes in."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from gradwatch_server import models  # noqa: F401  (registers the tables)

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
