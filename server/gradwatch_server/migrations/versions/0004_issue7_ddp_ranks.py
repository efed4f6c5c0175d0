"""DDP ranks: every rank's stream is a run of a group (rank 0's run id).

Revision ID: 0004_issue7
Revises: 0003_issue5
Create Date: 2026-11-30 06:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004_issue7"
down_revision: str | None = "0003_issue5"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Apply this migration."""
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("group_id", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("rank", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("world_size", sa.Integer(), nullable=True))
        batch.create_index("ix_runs_group_id", ["group_id"], unique=False)


def downgrade() -> None:
    """Undo this migration."""
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_group_id")
        batch.drop_column("world_size")
        batch.drop_column("rank")
        batch.drop_column("group_id")
