"""What the API returns (the public model family) and ``{data, count}`` envelopes.

Float fields may hold NaN/±Inf; they are sent as the strings ``"NaN"``, ``"Infinity"``
and ``"-Infinity"`` (see :mod:`gradwatch_server.jsonresp`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

JsonFloat = float | str


class FindingCounts(BaseModel):
    """Findings of a run by severity."""

    info: int = 0
    warning: int = 0
    error: int = 0


class RunPublic(BaseModel):
    """A run in lists (``gradwatch runs --json`` prints these)."""

    id: str
    name: str
    project: str
    status: str
    steps: int
    config_hash: str | None
    code_hash: str | None
    tags: list[str]
    host: str | None
    pid: int | None
    started: float | None = Field(description="collector start time, Unix seconds")
    ended: float | None = Field(description="END record time, Unix seconds")
    last_seen: float | None = Field(description="newest heartbeat/record time, Unix seconds")
    frames: int
    findings: FindingCounts
    group: str | None = Field(
        default=None, description="replicate group key '<config_hash>:<code_hash>'"
    )
    seed: int | None = Field(default=None, description="the user-set torch seed, if known")
    ddp_group: str | None = Field(
        default=None, description="DDP: the run every rank belongs to (rank 0's run id)"
    )
    rank: int | None = Field(default=None, description="DDP: this stream's rank")
    world_size: int | None = Field(default=None, description="DDP: number of ranks")
    job: str | None = Field(
        default=None,
        description="the launch that started the run: every rank and process of one "
        "`gradwatch run` invocation or torchrun job shares it",
    )


class RunsPublic(BaseModel):
    """A page of runs, newest first."""

    data: list[RunPublic]
    count: int = Field(description="runs matching the filters, over all pages")


class RunDetail(RunPublic):
    """A run with its start record (config, tensors, optimizers), fingerprint and end record."""

    start: dict[str, Any]
    fingerprint: dict[str, Any]
    end: dict[str, Any] | None


class FindingPublic(BaseModel):
    """One finding of a check (ids in CHECKS.md)."""

    run: str
    check: str
    severity: str
    step: int | None
    optimizer: int | None
    param: str | None
    message: str
    hint: str
    details: dict[str, Any]
    t: Any
    source: str = Field(description="runtime (a check in the training process) or lint")
    confirmed: bool | None = Field(
        default=None,
        description="lint findings: whether a runtime finding of the run confirms it "
        "(None for runtime findings)",
    )
    confirmed_by: dict[str, Any] | None = Field(
        default=None, description="the confirming runtime finding: {check, step}"
    )
    incident: str | None = Field(
        default=None,
        description="the incident: the id shared by the findings of one root cause "
        "(its cause's '<check>@<step>')",
    )
    role: str | None = Field(
        default=None, description="'cause' (the root cause of its incident) or 'consequence'"
    )


class IncidentPublic(BaseModel):
    """Findings of one root cause: one sentence naming it, the cause, its consequences."""

    id: str
    severity: str = Field(description="the worst severity among its findings")
    sentence: str = Field(description="the root cause, then what followed ('…; then …')")
    cause: FindingPublic
    consequences: list[FindingPublic]


class IncidentsPublic(BaseModel):
    """A run's incidents, in the order of their causes' steps (lint findings last)."""

    data: list[IncidentPublic]
    count: int


class FindingsPublic(BaseModel):
    """Findings of a run, by step."""

    data: list[FindingPublic]
    count: int


class Series(BaseModel):
    """One series: ``values[i]`` at ``steps[i]``; ``total`` points before downsampling."""

    name: str
    kind: str = Field(description="tensor, metric or scalar")
    stat: str | None = None
    optimizer: int | None = None
    steps: list[int]
    values: list[JsonFloat]
    total: int
    downsampled: bool


def _problems() -> Any:
    return Field(
        default_factory=list,
        description="stored data of the run that could not be read and was left out "
        "(normally empty; data written by an older server may be damaged)",
    )


class SeriesPublic(BaseModel):
    """Selected series of a run."""

    data: list[Series]
    count: int
    problems: list[str] = _problems()


class TypedArray(BaseModel):
    """A matrix as bytes (``encoding=base64``): ``bdata`` is the base64 of its ``shape[0] ×
    shape[1]`` little-endian ``dtype`` values (``f4``: float32, ``f8``: float64), row by row;
    NaN and ±Inf are IEEE values there, exact (Plotly reads this form as it is)."""

    dtype: str
    shape: list[int]
    bdata: str


class OverviewPublic(BaseModel):
    """What a run page needs first: the run, its loss and a tensors × steps heatmap.

    ``values[i][j]`` is the maximum of ``stat`` for tensor ``tensors[i]`` over the steps
    from ``steps[j]`` to just before ``steps[j + 1]`` (NaN if any step there was NaN, then
    +Inf if any was +Inf). ``also`` holds the statistics asked for with ``also`` in the
    same columns; with ``encoding=base64`` every matrix is a ``TypedArray``.
    """

    run: RunPublic
    stat: str
    tensors: list[str]
    steps: list[int]
    values: list[list[JsonFloat]] | TypedArray
    also: dict[str, list[list[JsonFloat]] | TypedArray] = {}
    loss: Series | None
    problems: list[str] = _problems()


class IngestReply(BaseModel):
    """The reply to an ingest request."""

    run: str
    accepted: int
    duplicates: int


class ErrorReply(BaseModel):
    """Every 4xx carries one sentence saying what was wrong and how to fix it."""

    detail: str


def error_replies(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: an :class:`ErrorReply` for each of these statuses."""
    return {code: {"model": ErrorReply} for code in codes}


class LifecycleStep(BaseModel):
    """One optimizer step's events, in order: ``[kind, seconds since last step, detail]``."""

    step: int
    n_backward: int | None
    events: list[list[Any]]


class LifecyclePublic(BaseModel):
    """The lifecycle of the steps ``start``..``end`` that were recorded."""

    data: list[LifecycleStep]
    count: int
    start: int
    end: int
    problems: list[str] = _problems()


class AlertRuleFields(BaseModel):
    """The changeable fields of an alert rule (a rule needs a check id, a min_severity or
    both; ``group`` is a replicate group key)."""

    check: str | None = Field(default=None, max_length=256)
    min_severity: str | None = Field(default=None, max_length=16)
    group: str | None = Field(default=None, max_length=600)
    webhook_url: str | None = Field(default=None, max_length=2000)
    secret: str | None = Field(default=None, max_length=1000)
    enabled: bool = True


class AlertRuleCreate(AlertRuleFields):
    """A new alert rule of ``project``."""

    project: str = Field(min_length=1, max_length=256)


class AlertRulePatch(AlertRuleFields):
    """Some fields of a rule: the fields sent replace the rule's, the others stay."""

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = sorted(AlertRuleFields.model_fields)
            unknown = set(data) - set(known)
            if unknown:
                raise ValueError(f"unknown rule fields {sorted(unknown)}; see {known}")
        return data


class AlertRulePublic(BaseModel):
    """An alert rule (the secret is never returned; the webhook URL is shortened to its host
    for read tokens: a webhook URL is a credential)."""

    id: int
    project: str
    check: str | None
    min_severity: str | None
    group: str | None
    webhook_url: str | None
    has_secret: bool
    enabled: bool
    created_at: float


class AlertRulesPublic(BaseModel):
    """Alert rules, by id."""

    data: list[AlertRulePublic]
    count: int


class DeliveryCounts(BaseModel):
    """An alert's webhook deliveries by status."""

    delivered: int = 0
    failed: int = 0
    pending: int = 0


class AlertPublic(BaseModel):
    """A finding that matched alert rules of its project."""

    id: int
    project: str
    run: str
    group: str | None
    check: str
    severity: str
    step: int | None
    param: str | None
    message: str
    details: dict[str, Any]
    created_at: float
    rules: list[int] = Field(description="ids of the rules it matched")
    deliveries: DeliveryCounts
    incident: str | None
    role: str | None
    summary: str | None = Field(description="its incident's one sentence when it was raised")


class AlertsPublic(BaseModel):
    """A page of alerts, newest first."""

    data: list[AlertPublic]
    count: int


class AlertDeliveryPublic(BaseModel):
    """One webhook delivery of an alert, with every attempt in ``log``."""

    id: int
    alert: int
    rule: int
    url: str | None
    status: str = Field(description="pending, delivered or failed")
    attempts: int
    http_status: int | None
    error: str | None
    created_at: float
    updated_at: float
    next_attempt_at: float | None
    log: list[Any]


class AlertDeliveriesPublic(BaseModel):
    """A page of the delivery log, newest first."""

    data: list[AlertDeliveryPublic]
    count: int


class GroupPublic(BaseModel):
    """A replicate group: the runs of one config hash and code hash."""

    key: str = Field(description="'<config_hash>:<code_hash>'")
    project: str
    config_hash: str
    code_hash: str | None
    runs: list[str]
    count: int
    baseline: str | None = Field(description="the pinned baseline run, if any")
    reference: str | None = Field(description="what the newest run is compared with live")
    seeds: list[int]
    drifted: list[str] = Field(description="runs with a repro-drift finding")
    outside_envelope: list[str] = Field(description="runs with a seed-envelope finding")
    last_started: float | None


class GroupsPublic(BaseModel):
    """Replicate groups, most recently started first."""

    data: list[GroupPublic]
    count: int


class EnvelopeRun(BaseModel):
    """One run of a seed sweep and whether its loss left the envelope (from which step)."""

    id: str
    seed: int
    outside: bool
    first_step: int | None


class EnvelopePublic(BaseModel):
    """A seed sweep's loss envelope: median ± 4 robust standard deviations per step."""

    key: str
    steps: list[int]
    median: list[JsonFloat]
    low: list[JsonFloat]
    high: list[JsonFloat]
    runs: list[EnvelopeRun]


class ComparePublic(BaseModel):
    """Two runs compared (what ``gradwatch compare A B --json`` prints): non-finite floats
    in the wire's tagged form (``{"$f": "nan"}``; decode with
    ``gradwatch.core.nonfinite.from_jsonable``),
    since ``difference`` may hold a string (a batch hash) where another pair has a float."""

    a: str
    b: str
    verdict: str = Field(description="identical, diverged or not-comparable")
    step: int | None = Field(description="the first divergent step")
    metric: str | None = Field(description="batch, loss or a per-tensor statistic")
    param: str | None = Field(description="the first differing tensor")
    optimizer: int | None
    cause: str | None
    difference: dict[str, Any] | None = Field(description="{a, b, abs, rel} at the split")
    message: str
    exact: bool = Field(description="compared bit for bit (no tolerance)")
    tolerance: dict[str, JsonFloat]
    steps_compared: int
    fingerprint_diff: list[dict[str, Any]]
    per_tensor: list[dict[str, Any]]
    problems: list[str] = _problems()


class HealthReply(BaseModel):
    """The server is up: its version and the wire schema version it accepts."""

    status: str = Field(description="always 'ok'")
    version: str
    schema_: int = Field(alias="schema", description="the wire schema version")


class StructurePublic(BaseModel):
    """A run's structure findings, by step: ``structure-change`` (info: from step N the
    lifecycle, the tensors that receive gradients, the modules in eval() mode, a param
    group's hyperparameters, the dtypes, the schedulers or the GradScaler's part differ),
    ``structure-safeguard`` (warning: clipping, a scheduler or train() mode stopped for
    the rest of the run) and ``group-invariant`` (warning: it breaks what held in every
    good run of its replicate group). Derived from the stored steps when read."""

    data: list[FindingPublic]
    count: int
    steps_read: int = Field(description="steps read, over all optimizers")
    truncated: bool = Field(description="the run has more steps than were read")
    problems: list[str] = _problems()


class GroupInvariant(BaseModel):
    """One thing that held on every step of every good run of a group."""

    invariant: str = Field(description="lifecycle, state:<element>, grads-always, grads-never")
    optimizer: int
    text: str


class InvariantBreak(BaseModel):
    """Where a run first differs, for good, from one invariant."""

    invariant: str
    step: int
    message: str


class GroupRunStructure(BaseModel):
    """One run of the group: whether it taught the invariants and which it breaks."""

    id: str
    name: str
    status: str
    good: bool = Field(description="finished with no error finding")
    learned_from: bool = Field(description="one of the runs the invariants were learned from")
    not_checked: str | None = Field(description="why the run is not checked, if it is not")
    truncated: bool
    breaks: list[InvariantBreak]


class GroupStructurePublic(BaseModel):
    """A replicate group's invariants and, per run, the ones it breaks (each run checked
    against the invariants of the *other* good runs)."""

    key: str
    project: str
    learned_from: list[str] = Field(description="ids of the runs the invariants hold in")
    learned_from_names: list[str]
    invariants: list[GroupInvariant]
    why_none: str | None = Field(description="why nothing was learned, if nothing was")
    runs: list[GroupRunStructure]
    not_read: int = Field(description="older runs of the group left out of the read")
    problems: list[str] = _problems()
