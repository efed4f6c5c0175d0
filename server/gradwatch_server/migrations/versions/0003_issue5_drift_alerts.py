"""Issue 5: replicate-group baselines, live drift state, alert rules, alerts, deliveries.

Revision ID: 0003_issue5
Revises: 0002_issue9
Create Date: 2026-11-30 05:23:34.243518
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003_issue5"
down_revision: str | None = "0002_issue9"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Apply this migration."""
    op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("check", sa.String(length=256), nullable=True),
        sa.Column("min_severity", sa.String(length=16), nullable=True),
        sa.Column("group_key", sa.String(length=513), nullable=True),
        sa.Column("webhook_url", sa.Text(), nullable=True),
        sa.Column("secret", sa.Text(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alert_rules", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alert_rules_project_id"), ["project_id"], unique=False)

    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("check", sa.String(length=256), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("param", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.Column("rules", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_alerts_project_id"), ["project_id"], unique=False)
        batch_op.create_index("ux_alerts_finding", ["run_id", "seq", "idx"], unique=True)

    op.create_table(
        "drift_states",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("checked_step", sa.BigInteger(), nullable=False),
        sa.Column("reference", sa.String(length=128), nullable=True),
        sa.Column("verdict", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "group_baselines",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("group_key", sa.String(length=513), nullable=False),
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("pinned_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("project_id", "group_key"),
    )
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["alert_id"],
            ["alerts.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_alert_deliveries_alert_id"), ["alert_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_alert_deliveries_rule_id"), ["rule_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_alert_deliveries_status"), ["status"], unique=False)


def downgrade() -> None:
    """Undo this migration."""
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alert_deliveries_status"))
        batch_op.drop_index(batch_op.f("ix_alert_deliveries_rule_id"))
        batch_op.drop_index(batch_op.f("ix_alert_deliveries_alert_id"))

    op.drop_table("alert_deliveries")
    op.drop_table("group_baselines")
    op.drop_table("drift_states")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_index("ux_alerts_finding")
        batch_op.drop_index(batch_op.f("ix_alerts_project_id"))

    op.drop_table("alerts")
    with op.batch_alter_table("alert_rules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_alert_rules_project_id"))

    op.drop_table("alert_rules")
