"""The database tables (SQLModel) and the public shapes the API returns.

Metadata is relational: projects, runs (+ tags), fingerprints, findings, events, tokens.
Per-step series are stored in chunks: one ``SeriesChunk`` per STEPS/SCALARS frame (a
window of steps) holding its step numbers, and one ``SeriesBlob`` per array of that frame
(per statistic for the tensor stats, laid out tensors × steps), each a packed
little-endian array. NaN and ±Inf live inside the blobs, so they are exact on every
database. Anything else that may hold a non-finite float is JSON text written with
``gradwatch.core.nonfinite.to_jsonable``. Every frame's data is keyed by ``(run_id, seq)``; the
``IngestedFrame`` row with the same key is what makes ingest idempotent.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Index, LargeBinary, String, Text
from sqlmodel import Field, SQLModel

RUN_ID_MAX = 128
NAME_MAX = 256
INCIDENT_MAX = NAME_MAX + 32  # "<check>@<step>~<digest>"


def _big(primary_key: bool = False, index: bool = False) -> Column[int]:
    return Column(BigInteger, primary_key=primary_key, index=index, nullable=False)


class Project(SQLModel, table=True):
    """A namespace for runs and tokens."""

    __tablename__ = "projects"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(sa_column=Column(String(NAME_MAX), unique=True, nullable=False))


class Run(SQLModel, table=True):
    """One training run; columns filled from its RUN_START, HEARTBEAT and END records."""

    __tablename__ = "runs"
    id: str = Field(sa_column=Column(String(RUN_ID_MAX), primary_key=True))
    project_id: int = Field(foreign_key="projects.id", index=True)
    name: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    config_hash: str | None = Field(default=None, max_length=NAME_MAX, index=True)
    code_hash: str | None = Field(default=None, max_length=NAME_MAX, index=True)
    host: str | None = Field(default=None, sa_column=Column(Text))
    pid: int | None = Field(default=None, sa_column=Column(BigInteger))
    started_at: float | None = Field(default=None, sa_column=Column(Float))
    ended_at: float | None = Field(default=None, sa_column=Column(Float))
    end_status: str | None = Field(default=None, max_length=32)
    steps: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, default=0))
    last_t: float | None = Field(default=None, sa_column=Column(Float))
    received_at: float = Field(default=0.0, sa_column=Column(Float, nullable=False, default=0))
    frames: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, default=0))
    start_meta: str = Field(default="{}", sa_column=Column(Text, nullable=False, default="{}"))
    end_meta: str | None = Field(default=None, sa_column=Column(Text))
    # DDP: every rank's stream is a run of the group named by rank 0's run id
    group_id: str | None = Field(default=None, max_length=RUN_ID_MAX, index=True)
    rank: int | None = Field(default=None)
    world_size: int | None = Field(default=None)
    # the launch that started it (gradwatch.core.jobs): every rank and process of one job
    job_id: str | None = Field(default=None, max_length=RUN_ID_MAX, index=True)


class RunTag(SQLModel, table=True):
    """A tag of a run (for filtering)."""

    __tablename__ = "run_tags"
    run_id: str = Field(foreign_key="runs.id", primary_key=True, max_length=RUN_ID_MAX)
    tag: str = Field(primary_key=True, max_length=NAME_MAX, index=True)


class IngestedFrame(SQLModel, table=True):
    """One frame accepted for a run: the idempotency key of ingest."""

    __tablename__ = "ingested_frames"
    run_id: str = Field(foreign_key="runs.id", primary_key=True, max_length=RUN_ID_MAX)
    seq: int = Field(sa_column=_big(primary_key=True))
    kind: int
    received_at: float = Field(sa_column=Column(Float, nullable=False))


class Fingerprint(SQLModel, table=True):
    """One FINGERPRINT record (``phase`` fast or slow); the API merges them."""

    __tablename__ = "fingerprints"
    run_id: str = Field(foreign_key="runs.id", primary_key=True, max_length=RUN_ID_MAX)
    seq: int = Field(sa_column=_big(primary_key=True))
    phase: str = Field(default="", max_length=32)
    data: str = Field(sa_column=Column(Text, nullable=False))


class Finding(SQLModel, table=True):
    """One finding of a check (see CHECKS.md); ``details`` and ``t`` are JSON text."""

    __tablename__ = "findings"
    run_id: str = Field(foreign_key="runs.id", primary_key=True, max_length=RUN_ID_MAX)
    seq: int = Field(sa_column=_big(primary_key=True))
    idx: int = Field(primary_key=True)
    check: str = Field(max_length=NAME_MAX, index=True)
    severity: str = Field(max_length=16)
    step: int | None = Field(default=None, sa_column=Column(BigInteger))
    optimizer: int | None = Field(default=None, sa_column=Column(BigInteger))
    param: str | None = Field(default=None, sa_column=Column(Text))
    message: str = Field(sa_column=Column(Text, nullable=False))
    hint: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    source: str = Field(default="runtime", max_length=32)
    details: str = Field(default="{}", sa_column=Column(Text, nullable=False, default="{}"))
    t: str = Field(default="null", sa_column=Column(Text, nullable=False, default="null"))
    # gradwatch.core.incidents: the incident (its cause's id) and this finding's role in it
    incident: str | None = Field(default=None, max_length=INCIDENT_MAX)
    role: str | None = Field(default=None, max_length=16)


class Event(SQLModel, table=True):
    """An EVENTS or NOTICE record, kept as JSON text."""

    __tablename__ = "events"
    run_id: str = Field(foreign_key="runs.id", primary_key=True, max_length=RUN_ID_MAX)
    seq: int = Field(sa_column=_big(primary_key=True))
    kind: int
    data: str = Field(sa_column=Column(Text, nullable=False))


class SeriesChunk(SQLModel, table=True):
    """A window of steps of one optimizer (``optimizer`` -1: user scalars)."""

    __tablename__ = "series_chunks"
    __table_args__ = (Index("ix_series_chunks_run_opt_step", "run_id", "optimizer", "step_first"),)
    run_id: str = Field(foreign_key="runs.id", primary_key=True, max_length=RUN_ID_MAX)
    seq: int = Field(sa_column=_big(primary_key=True))
    optimizer: int
    step_first: int = Field(sa_column=Column(BigInteger, nullable=False))
    step_last: int = Field(sa_column=Column(BigInteger, nullable=False))
    n: int
    steps: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    meta: str = Field(default="{}", sa_column=Column(Text, nullable=False, default="{}"))


class SeriesBlob(SQLModel, table=True):
    """One packed array of a chunk, e.g. ``loss`` (n) or ``stat:grad_norm`` (tensors × n)."""

    __tablename__ = "series_blobs"
    run_id: str = Field(primary_key=True, max_length=RUN_ID_MAX)
    seq: int = Field(sa_column=_big(primary_key=True))
    name: str = Field(primary_key=True, max_length=NAME_MAX)
    dtype: str = Field(max_length=8)
    rows: int
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class Token(SQLModel, table=True):
    """An API token of a project; only its SHA-256 is stored."""

    __tablename__ = "tokens"
    id: int | None = Field(default=None, primary_key=True)
    project_id: int = Field(foreign_key="projects.id", index=True)
    scope: str = Field(max_length=16)
    digest: str = Field(sa_column=Column(String(64), unique=True, nullable=False))
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    revoked_at: float | None = Field(default=None, sa_column=Column(Float, nullable=True))


class SpoolImport(SQLModel, table=True):
    """How far the server has imported a local run folder's spool (its own cursor)."""

    __tablename__ = "spool_imports"
    run_id: str = Field(primary_key=True, max_length=RUN_ID_MAX)
    segment: int = Field(sa_column=Column(BigInteger, nullable=False))
    offset: int = Field(sa_column=Column(BigInteger, nullable=False))


# --- drift across repeated runs, and alerts (issue 5) ---

GROUP_KEY_MAX = 2 * NAME_MAX + 1  # "<config_hash>:<code_hash>"


class GroupBaseline(SQLModel, table=True):
    """The run a replicate group's live comparison uses as reference, pinned by the user."""

    __tablename__ = "group_baselines"
    project_id: int = Field(foreign_key="projects.id", primary_key=True)
    group_key: str = Field(primary_key=True, max_length=GROUP_KEY_MAX)
    run_id: str = Field(foreign_key="runs.id", max_length=RUN_ID_MAX)
    pinned_at: float = Field(sa_column=Column(Float, nullable=False))


class DriftState(SQLModel, table=True):
    """How far a run has been compared live with its reference, and the verdict so far."""

    __tablename__ = "drift_states"
    run_id: str = Field(foreign_key="runs.id", primary_key=True, max_length=RUN_ID_MAX)
    seed: int | None = Field(default=None, sa_column=Column(BigInteger))
    checked_step: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, default=0))
    reference: str | None = Field(default=None, max_length=RUN_ID_MAX)
    verdict: str = Field(default="", max_length=32)


class AlertRule(SQLModel, table=True):
    """Which findings of a project alert (a check id and/or a severity threshold, optionally
    one group), and the webhook they go to."""

    __tablename__ = "alert_rules"
    id: int | None = Field(default=None, primary_key=True)
    project_id: int = Field(foreign_key="projects.id", index=True)
    check: str | None = Field(default=None, max_length=NAME_MAX)
    min_severity: str | None = Field(default=None, max_length=16)
    group_key: str | None = Field(default=None, max_length=GROUP_KEY_MAX)
    webhook_url: str | None = Field(default=None, sa_column=Column(Text))
    secret: str | None = Field(default=None, sa_column=Column(Text))
    enabled: bool = True
    created_at: float = Field(sa_column=Column(Float, nullable=False))


class Alert(SQLModel, table=True):
    """A finding that matched at least one alert rule (one alert per finding)."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ux_alerts_finding", "run_id", "seq", "idx", unique=True),)
    id: int | None = Field(default=None, primary_key=True)
    project_id: int = Field(foreign_key="projects.id", index=True)
    run_id: str = Field(foreign_key="runs.id", max_length=RUN_ID_MAX)
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    idx: int
    check: str = Field(max_length=NAME_MAX)
    severity: str = Field(max_length=16)
    step: int | None = Field(default=None, sa_column=Column(BigInteger))
    param: str | None = Field(default=None, sa_column=Column(Text))
    message: str = Field(sa_column=Column(Text, nullable=False))
    details: str = Field(default="{}", sa_column=Column(Text, nullable=False, default="{}"))
    rules: str = Field(default="[]", sa_column=Column(Text, nullable=False, default="[]"))
    incident: str | None = Field(default=None, max_length=INCIDENT_MAX)
    role: str | None = Field(default=None, max_length=16)
    #: the incident's one sentence (root cause; then what followed) when the alert was raised
    summary: str | None = Field(default=None, sa_column=Column(Text))
    created_at: float = Field(sa_column=Column(Float, nullable=False))


class AlertDelivery(SQLModel, table=True):
    """One webhook delivery of an alert: its state, attempts and the log of every attempt."""

    __tablename__ = "alert_deliveries"
    id: int | None = Field(default=None, primary_key=True)
    alert_id: int = Field(foreign_key="alerts.id", index=True)
    rule_id: int = Field(index=True)
    url: str = Field(sa_column=Column(Text, nullable=False))
    status: str = Field(default="pending", max_length=16, index=True)
    attempts: int = 0
    http_status: int | None = None
    error: str | None = Field(default=None, sa_column=Column(Text))
    created_at: float = Field(sa_column=Column(Float, nullable=False))
    updated_at: float = Field(sa_column=Column(Float, nullable=False))
    next_attempt_at: float | None = Field(default=None, sa_column=Column(Float))
    log: str = Field(default="[]", sa_column=Column(Text, nullable=False, default="[]"))
