"""Initial schema: projects, runs, tags, frames, fingerprints, findings, events, series, tokens.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-30 03:14:39.773570
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Apply this migration."""
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "series_blobs",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", "name"),
    )
    op.create_table(
        "spool_imports",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("segment", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("config_hash", sa.String(length=256), nullable=True),
        sa.Column("code_hash", sa.String(length=256), nullable=True),
        sa.Column("host", sa.Text(), nullable=True),
        sa.Column("pid", sa.BigInteger(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("end_status", sa.String(length=32), nullable=True),
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.Column("last_t", sa.Float(), nullable=True),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.Column("frames", sa.BigInteger(), nullable=False),
        sa.Column("start_meta", sa.Text(), nullable=False),
        sa.Column("end_meta", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_code_hash"), ["code_hash"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_config_hash"), ["config_hash"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_project_id"), ["project_id"], unique=False)

    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tokens_project_id"), ["project_id"], unique=False)

    op.create_table(
        "events",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Integer(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    op.create_table(
        "findings",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("check", sa.String(length=256), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("optimizer", sa.BigInteger(), nullable=True),
        sa.Column("param", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("hint", sa.Text(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.Column("t", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id", "seq", "idx"),
    )
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_findings_check"), ["check"], unique=False)

    op.create_table(
        "fingerprints",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    op.create_table(
        "ingested_frames",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("tag", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id", "tag"),
    )
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_tags_tag"), ["tag"], unique=False)

    op.create_table(
        "series_chunks",
        sa.Column("run_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("optimizer", sa.Integer(), nullable=False),
        sa.Column("step_first", sa.BigInteger(), nullable=False),
        sa.Column("step_last", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("steps", sa.LargeBinary(), nullable=False),
        sa.Column("meta", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
        ),
        sa.PrimaryKeyConstraint("run_id", "seq"),
    )
    with op.batch_alter_table("series_chunks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_series_chunks_run_opt_step", ["run_id", "optimizer", "step_first"], unique=False
        )


def downgrade() -> None:
    """Undo this migration."""
    with op.batch_alter_table("series_chunks", schema=None) as batch_op:
        batch_op.drop_index("ix_series_chunks_run_opt_step")

    op.drop_table("series_chunks")
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_tags_tag"))

    op.drop_table("run_tags")
    op.drop_table("ingested_frames")
    op.drop_table("fingerprints")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_findings_check"))

    op.drop_table("findings")
    op.drop_table("events")
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tokens_project_id"))

    op.drop_table("tokens")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_project_id"))
        batch_op.drop_index(batch_op.f("ix_runs_config_hash"))
        batch_op.drop_index(batch_op.f("ix_runs_code_hash"))

    op.drop_table("runs")
    op.drop_table("spool_imports")
    op.drop_table("series_blobs")
    op.drop_table("projects")
