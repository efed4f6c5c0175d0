"""Token revocation: ``tokens.revoked_at`` (NULL while the token is valid).

Revision ID: 0002_issue9
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002_issue9"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Add the revocation time."""
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revoked_at", sa.Float(), nullable=True))


def downgrade() -> None:
    """Drop the revocation time (revoked tokens become valid again)."""
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_column("revoked_at")
