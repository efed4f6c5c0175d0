"""The wire contract between the collector and the server, defined once: what each record
kind's ``meta`` holds (:class:`typing.TypedDict` per kind), the names of the per-tensor
statistics, the severities and the defaults. The framing (how a record becomes bytes) is
:mod:`gradwatch.core.wire`; the collector builds its records through
:mod:`gradwatch.transport.record_builder` and the server validates them in
``gradwatch_server.ingest.frame_rows`` against the names here.

Standard library only: the server imports it without torch.
"""

from collections.abc import Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict

#: the per-tensor statistics of a STEPS record, in the order of its ``stats`` array
STAT_NAMES: Final[tuple[str, ...]] = ("grad_norm", "param_norm", "update_norm", "nonfinite_grad")

Severity = Literal["info", "warning", "error"]
#: a finding's severity, mildest first
SEVERITIES: Final[tuple[Severity, ...]] = ("info", "warning", "error")
#: a finding's role in its incident
ROLES: Final[tuple[str, ...]] = ("cause", "consequence")
#: the project of a run that names none
DEFAULT_PROJECT: Final = "default"


class WatchOptionsMeta(TypedDict):
    """The options of ``watch()`` that readers need to interpret the data."""

    every: int
    accumulation_steps: int | None  # declared; None when inferred
    checks: Mapping[str, str]  # check id -> policy set for this run
    batch_checksum: bool
    ddp_every: int
    stats: str


#: one watched model (``class``: its class name)
ModelMeta = TypedDict("ModelMeta", {"key": str, "class": str, "numel": int})


class TensorMeta(TypedDict):
    name: str
    shape: list[int]
    dtype: str
    numel: int
    device: str
    optimizer: int
    group: int
    requires_grad: bool


#: one optimizer (``class``: its class name; ``groups``: its hyperparameters per group)
OptimizerMeta = TypedDict("OptimizerMeta", {"class": str, "groups": list[dict[str, Any]]})


class RunStartMeta(TypedDict):
    """RUN_START: the first record of every run."""

    run: str
    project: str
    name: str
    tags: list[str]
    config: Any
    config_hash: str | None
    started_at: float
    pid: int
    host: str
    argv: list[str]
    schema: int
    gradwatch: str
    stats: list[str]
    stats_kernel: NotRequired[str]  # how parameter/update norms are summed on the host
    options: WatchOptionsMeta
    ddp: NotRequired[dict[str, Any]]  # this rank's place in a multi-rank job
    job: str
    models: list[ModelMeta]
    tensors: list[TensorMeta]
    optimizers: list[OptimizerMeta]


#: FINGERPRINT: ``{"phase": FingerprintPhase, **sections}``, the sections being those of
#: :mod:`gradwatch.fingerprint.take` (fast, at start) and ``.provenance`` (slow, later)
FingerprintPhase = Literal["fast", "slow"]


class RunLayout(TypedDict):
    """The parameter layout part of RUN_START."""

    tensors: list[TensorMeta]
    optimizers: list[OptimizerMeta]


class StepsMeta(TypedDict):
    """STEPS: a window of optimizer steps (arrays: step, loss, has_loss, batch, stats,
    has_grad, lr, n_backward, wall_time, phases)."""

    optimizer: int
    stats: list[str]
    events: list[list[list[Any]]]  # per step: [kind, seconds, detail] per lifecycle event
    batch_hash: list[str | None]
    batch_signature: list[list[str]]


class ScalarsMeta(TypedDict):
    """SCALARS: ``run.log`` values (arrays: step, key, value); ``keys`` names the key
    indices."""

    keys: list[str]


class FindingsMeta(TypedDict):
    """FINDINGS: finding metas (:meth:`gradwatch.checks.findings.Finding.to_meta`)."""

    findings: list[dict[str, Any]]


class HeartbeatMeta(TypedDict):
    t: float
    steps: list[int]  # completed steps per optimizer


class EndMeta(TypedDict):
    """END: the last record of a run that closed."""

    status: str
    error: str | None
    ended_at: float
    steps: list[int]
    internal_errors: int
    io: dict[str, Any]  # the writer's counters
    #: "stored": the run's structure findings were computed by the collector at close and
    #: stored with its findings (gradwatch.core.structure.recorder); readers derive them otherwise
    structure: NotRequired[str]


class NoticeMeta(TypedDict):
    """NOTICE: something about the collection itself (``checks-behind``,
    ``ddp-fingerprint``); the other keys depend on ``notice``."""

    notice: str
    step: NotRequired[int]
    differ: NotRequired[Any]


def status_words(status: str, counts: Mapping[str, int]) -> str:
    """A run's status as the runs list, the run page and ``gradwatch runs`` all say it: a
    run that finished with an error or warning finding reads ``finished with errors`` (or
    ``warnings``), never as a plain success."""
    worst = next((s for s in ("error", "warning") if counts.get(s)), None)
    return f"finished with {worst}s" if status == "finished" and worst else status


def findings_words(counts: Mapping[str, int]) -> str:
    """A run's findings counted in words, worst first: ``2 errors, 1 warning``; ``ok``."""
    parts = []
    for sev in reversed(SEVERITIES):
        n = int(counts.get(sev, 0) or 0)
        if n:
            parts.append(f"{n} {sev}" + ("s" if n > 1 and sev != "info" else ""))
    return ", ".join(parts) or "ok"
