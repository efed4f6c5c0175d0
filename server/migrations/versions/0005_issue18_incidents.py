"""Issue 18: incidents (every finding's incident and role; an alert's incident sentence)
and jobs (the launch a run belongs to).

Revision ID: 0005_issue18
Revises: 0004_issue7
Create Date: 2026-12-01 15:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005_issue18"
down_revision: str | None = "0004_issue7"
branch_labels: str | None = None
depends_on: str | None = None

INCIDENT_MAX = 288


def upgrade() -> None:
    """Apply this migration."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("job_id", sa.String(length=128), nullable=True))
        batch.create_index("ix_runs_job_id", ["job_id"], unique=False)
    with op.batch_alter_table("findings") as batch:
        batch.add_column(sa.Column("incident", sa.String(length=INCIDENT_MAX), nullable=True))
        batch.add_column(sa.Column("role", sa.String(length=16), nullable=True))
    with op.batch_alter_table("alerts") as batch:
        batch.add_column(sa.Column("incident", sa.String(length=INCIDENT_MAX), nullable=True))
        batch.add_column(sa.Column("role", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("summary", sa.Text(), nullable=True))


def downgrade() -> None:
    """Undo this migration."""
    with op.batch_alter_table("alerts") as batch:
        batch.drop_column("summary")
        batch.drop_column("role")
        batch.drop_column("incident")
    with op.batch_alter_table("findings") as batch:
        batch.drop_column("role")
        batch.drop_column("incident")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_job_id")
        batch.drop_column("job_id")
