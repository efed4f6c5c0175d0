"""Issue 18: incidents (every finding's incident and role; an alert's incident sentence)
and jobs (the launch a run belongs to).

Revision ID: 0005_issue18
Revises: 0004_issue7
Create Date: 2026-12-01 15:20:00
"""

from __future__ import annotations

import json
from itertools import groupby
from typing import Any

import sqlalchemy as sa
from alembic import op

from gradwatch.core.incidents import group

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
    _group_stored_findings()


def _group_stored_findings() -> None:
    """Findings stored before this revision get their incident and role, run by run."""
    conn = op.get_bind()
    findings = sa.table(
        "findings",
        *(sa.column(c) for c in ("run_id", "seq", "idx", "check", "step", "optimizer")),
        *(sa.column(c) for c in ("param", "details", "source", "incident", "role")),
    )
    rows = conn.execute(
        sa.select(findings).order_by(findings.c.run_id, findings.c.seq, findings.c.idx)
    ).mappings()
    for run_id, items in groupby(rows, key=lambda r: r["run_id"]):
        plain: list[dict[str, Any]] = [
            {**r, "details": json.loads(r["details"] or "{}")} for r in items
        ]
        for f, (incident, role) in zip(plain, group(plain), strict=True):
            conn.execute(
                sa.update(findings)
                .where(
                    findings.c.run_id == run_id,
                    findings.c.seq == f["seq"],
                    findings.c.idx == f["idx"],
                )
                .values(incident=incident, role=role)
            )


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
