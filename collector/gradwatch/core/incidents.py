"""Incidents: the findings that follow from one onset, with one root cause named.

A finding is either the ``cause`` of its incident or a ``consequence`` of an earlier
finding's cause. :func:`group` is a pure function of the findings (dicts in the wire form
of :meth:`gradwatch.checks.findings.Finding.to_meta`) used by the collector while a run goes
(:class:`Grouper`, in arrival order) and by every reader of stored findings (CLI, server,
dashboard), in step order. The rules are ordered: the first rule whose cause is open and
whose window holds the new finding's step claims it. An incident's id is derived from its
cause alone, so the same findings regrouped get the same ids.

One check at one step is one onset however many tensors, param groups or optimizers show
it (four optimizers that all lack ``zero_grad()`` are one line of code to read at 2 a.m.):
its id is ``check@step`` and the other findings of that check and step join it. A finding
that is itself a cause kind (an ``lr-too-large`` at the step of an ``lr-jump``) joins its
owner's incident and lends it its own rule: the incident explains what either would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Role = Literal["cause", "consequence"]
UNBOUNDED: Final = 1 << 62
#: steps after a structure change within which it is a candidate cause (five times the
#: window over which gradwatch.core.structure.timeline judges a change)
STRUCTURE_WINDOW: Final = 100

_NONFINITE: Final = frozenset(
    {"nonfinite-loss", "nonfinite-grad", "nonfinite-param", "ddp-nonfinite-rank"}
)
_SYMPTOMS: Final = _NONFINITE | {
    "exploding-grad",
    "loss-diverging",
    "update-ratio",
    "amp-overflow",
    "ddp-rank-spread",
}
_STALLED: Final = frozenset(
    {"loss-plateau", "param-not-updated", "update-ratio", "vanishing-grad", "loss-diverging"}
)
#: a stall without numeric trouble: gradients that fade, weights that stand still
_FADED: Final = frozenset({"vanishing-grad", "param-not-updated", "loss-plateau"})
#: what a learning rate far too large does besides diverging: ReLU units pushed into their
#: dead region pass back exactly zero gradient (``param-no-grad`` names both causes)
_LR_HARM: Final = frozenset({"vanishing-grad", "param-no-grad"})
#: a loss that no longer carries the inputs' information: stuck at the level of predicting
#: the targets' marginal, with gradients that say nothing about the inputs
_NO_INFO: Final = frozenset({"loss-at-chance", "loss-plateau", "param-no-grad"})


@dataclass(frozen=True)
class Rule:
    """Findings of ``cause`` (or of ``kind``, see :func:`kind_of`) explain findings of
    ``consequences`` whose step lies in ``[cause step - lead, cause step + window]``
    (``lead``: a learning rate is read when its step runs, while the gradients it spoiled
    can be seen one step earlier in the other checks' counting)."""

    kind: str
    consequences: frozenset[str]
    window: int
    label: str
    lead: int = 0


#: Ordered: an earlier rule wins when two open causes could claim a finding.
RULES: Final[tuple[Rule, ...]] = (
    # a rate too large at the step it jumped is the jump seen by the size check: one cause
    Rule("lr-jump", _SYMPTOMS | _LR_HARM | {"lr-too-large"}, 50, "learning-rate jump", lead=1),
    Rule("lr-collapse", _STALLED, UNBOUNDED, "learning-rate collapse", lead=1),
    Rule(
        "lr-too-large",
        _SYMPTOMS | _STALLED | _LR_HARM,
        UNBOUNDED,
        "learning rate too large",
        lead=1,
    ),
    Rule("input-batch", _SYMPTOMS, 20, "input batch"),
    Rule("nan-origin", _SYMPTOMS, 20, "operation found by NaN provenance"),
    Rule("stale-grad", _SYMPTOMS | _STALLED, UNBOUNDED, "stale gradients"),
    Rule("grad-zeroed-before-step", _STALLED | _SYMPTOMS, UNBOUNDED, "gradients cleared"),
    Rule("accumulation-wiped", _STALLED | _SYMPTOMS, UNBOUNDED, "discarded gradients"),
    Rule("clip-before-backward", _SYMPTOMS, UNBOUNDED, "clipping before backward()"),
    # one batch over and over is fitted to zero loss: its gradients fade and the steps stop
    Rule("repeated-batch", _STALLED | {"loss-plateau"}, UNBOUNDED, "repeated input batch"),
    # a loss that pairs every prediction with every target is minimised by one constant
    # output: it stalls at the level of predicting the mean, with nothing left to learn
    Rule("loss-shape-mismatch", _STALLED | _NO_INFO, UNBOUNDED, "loss shape mismatch"),
    Rule(
        "param-mutated-outside-step",
        _SYMPTOMS | {"frozen-param-changed", "param-not-updated"},
        20,
        "parameter changed outside step()",
    ),
    Rule("ddp-param-desync", frozenset({"ddp-rank-spread", "repro-drift"}), UNBOUNDED, "desync"),
    # a change of the run's structure (gradwatch.core.structure, derived when a run is read) is
    # a candidate cause of the symptoms after it: a dropped safeguard for the rest of the
    # run, any other change for STRUCTURE_WINDOW steps
    Rule("structure-safeguard", _SYMPTOMS | _STALLED, UNBOUNDED, "safeguard dropped"),
    Rule("group-invariant", _SYMPTOMS | _STALLED, UNBOUNDED, "differs from its replicates"),
    Rule("structure-change", _SYMPTOMS | _STALLED, STRUCTURE_WINDOW, "structure change"),
    # no cause upstream was recorded: the first numeric symptom stands for the others
    Rule("nonfinite", _NONFINITE | {"exploding-grad", "loss-diverging", "update-ratio"}, 20, "NaN"),
    Rule("exploding-grad", _SYMPTOMS, 20, "exploding gradients"),
    # eval() freezes normalisation at its running statistics: the activations' scale is no
    # longer held through depth, so gradients fade and training stalls (last: any other
    # cause that could explain a symptom names it first)
    Rule("eval-mode-training", _FADED, UNBOUNDED, "model in eval mode"),
)
_RULE: Final = {r.kind: r for r in RULES}
_RANK: Final = {r.kind: i for i, r in enumerate(RULES)}


def kind_of(finding: Mapping[str, Any]) -> str | None:
    """The root-cause kind a finding can stand for, or None when it is only a symptom.

    A non-finite finding whose NaN provenance traced the value to the input batch is an
    ``input-batch`` cause; one traced to an operation is a ``nan-origin`` cause; an input
    batch flagged as an outlier (``details.batch_outlier``) is an ``input-batch`` cause
    whatever the check."""
    check = str(finding.get("check", ""))
    details = finding.get("details") or {}
    origin = details.get("origin") if isinstance(details, Mapping) else None
    if isinstance(details, Mapping) and details.get("batch_outlier"):
        return "input-batch"
    if isinstance(origin, Mapping) and origin.get("found"):
        return "input-batch" if origin.get("phase") == "input" else "nan-origin"
    if check in _NONFINITE:
        return "nonfinite"
    return check if check in _RULE else None


def incident_id(finding: Mapping[str, Any]) -> str:
    """``check@step`` of the cause: one check's onsets at one step, on any number of
    tensors, param groups or optimizers, are one incident."""
    step = finding.get("step")
    return f"{finding.get('check', '?')}@{'-' if step is None else step}"


@dataclass
class Incident:
    """One root cause and how many findings followed from it. ``spans``: the rules by which
    it explains later findings, each with the step it counts from (its cause's; plus those
    of consequences that are cause kinds themselves)."""

    id: str
    kind: str | None
    step: int | None
    consequences: int = 0
    spans: list[tuple[str, int]] = field(default_factory=list)


def _step(finding: Mapping[str, Any]) -> int | None:
    step = finding.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


class Grouper:
    """Assigns incidents one finding at a time (the collector's live use). Only causes that
    can explain later findings are kept, so a long run's many findings cost little."""

    def __init__(self) -> None:
        self.incidents: dict[str, Incident] = {}
        self._open: list[Incident] = []

    def add(self, finding: Mapping[str, Any]) -> tuple[str, Role]:
        """The incident and role of ``finding`` given every finding added before it."""
        owner = self._owner(finding) or self.incidents.get(incident_id(finding))
        kind, step = kind_of(finding), _step(finding)
        if owner is not None:  # a consequence, or the same onset on another tensor
            owner.consequences += 1
            if kind in _RULE and step is not None and (kind, step) not in owner.spans:
                owner.spans.append((kind, step))  # it explains what its member would
            return owner.id, "consequence"
        incident = Incident(incident_id(finding), kind, step)
        self.incidents[incident.id] = incident
        if kind in _RULE and step is not None:
            incident.spans.append((kind, step))
            self._open.append(incident)
        return incident.id, "cause"

    def _owner(self, finding: Mapping[str, Any]) -> Incident | None:
        if finding.get("source", "runtime") != "runtime":
            return None  # lint findings are about the code, not an onset
        step, check = _step(finding), finding.get("check")
        if step is None:
            return None
        best: tuple[int, Incident] | None = None
        for incident in self._open:
            for kind, at in incident.spans:
                rule = _RULE[kind]
                if check not in rule.consequences:
                    continue
                if not at - rule.lead <= step <= at + rule.window:
                    continue
                if best is None or _RANK[kind] < best[0]:
                    best = (_RANK[kind], incident)
        return best[1] if best else None


def _order(findings: Sequence[Mapping[str, Any]]) -> list[int]:
    """Step order; at one step, causes of earlier rules first, then arrival order."""

    def key(i: int) -> tuple[int, int, int]:
        step = _step(findings[i])
        kind = kind_of(findings[i])
        rule = _RULE.get(kind or "")
        at = UNBOUNDED if step is None else step - (rule.lead if rule else 0)
        return (at, _RANK.get(kind or "", len(RULES)), i)

    return sorted(range(len(findings)), key=key)


def group(findings: Sequence[Mapping[str, Any]]) -> list[tuple[str, Role]]:
    """``(incident, role)`` of every finding, in the input's order."""
    grouper = Grouper()
    out: list[tuple[str, Role]] = [("", "cause")] * len(findings)
    for i in _order(findings):
        out[i] = grouper.add(findings[i])
    return out


def annotate(findings: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``findings`` with ``incident`` and ``role`` set by :func:`group`."""
    items = list(findings)
    return [{**f, "incident": i, "role": r} for f, (i, r) in zip(items, group(items), strict=True)]


_SEVERITY_RANK: Final = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class View:
    """An incident for display: its findings (annotated dicts), the cause first."""

    id: str
    cause: dict[str, Any]
    consequences: list[dict[str, Any]]

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The cause, then its consequences in step order."""
        return [self.cause, *self.consequences]

    @property
    def severity(self) -> str:
        """The worst severity among the incident's findings."""
        return max((str(f.get("severity", "info")) for f in self.findings), key=_sev_rank)

    def sentence(self) -> str:
        """One sentence naming the root cause, then what followed (``…; then …``)."""
        root = root_text(self.cause)
        then = _then(self.consequences)
        return f"{root}; then {then}." if then else f"{root}."


def _sev_rank(severity: str) -> int:
    return _SEVERITY_RANK.get(severity, -1)


def _first_sentence(text: str) -> str:
    head, dot, _ = text.strip().partition(". ")
    return head.rstrip(".") if dot or text.strip().endswith(".") else head


def root_text(cause: Mapping[str, Any]) -> str:
    """The root cause as a clause: the NaN provenance's sentence when it found the origin,
    else the cause's own message (led by check and step unless it names the step)."""
    details = cause.get("details") or {}
    origin = details.get("origin") if isinstance(details, Mapping) else None
    if isinstance(origin, Mapping) and origin.get("found") and origin.get("summary"):
        return _first_sentence(str(origin["summary"]))
    step = cause.get("step")
    message = _first_sentence(str(cause.get("message", "")))
    where = f" ({cause['param']})" if cause.get("param") else ""
    if step is not None and f"step {step}" in message:
        return f"{cause.get('check')}{where}: {message}"
    at = f" at step {step}" if step is not None else ""
    return f"{cause.get('check')}{at}{where}: {message}"


def evidence(finding: Mapping[str, Any]) -> str:
    """A finding's message as evidence under its incident: a consequence leaves out the NaN
    provenance's sentence, which its cause states once for the whole incident (so no line
    of one incident claims a step the others contradict)."""
    message = str(finding.get("message", ""))
    details = finding.get("details") or {}
    origin = details.get("origin") if isinstance(details, Mapping) else None
    if finding.get("role") != "consequence" or not isinstance(origin, Mapping):
        return message
    summary = str(origin.get("summary") or "")
    return " ".join(message.replace(summary, "").split()) if summary else message


def _steps(steps: list[int]) -> str:
    lo, hi = min(steps), max(steps)
    return f"step {lo}" if lo == hi else f"steps {lo}–{hi}"


def _then(consequences: Sequence[Mapping[str, Any]]) -> str:
    """``nonfinite-loss at step 152, exploding-grad at steps 151–153 (8 findings)``."""
    by_check: dict[str, list[int]] = {}
    for f in consequences:
        steps = by_check.setdefault(str(f.get("check")), [])
        if isinstance(f.get("step"), int):
            steps.append(int(f["step"]))
    parts = []
    for check, steps in by_check.items():
        n = sum(1 for f in consequences if f.get("check") == check)
        at = f" at {_steps(steps)}" if steps else ""
        parts.append(f"{check}{at}" + (f" ({n} findings)" if n > 1 else ""))
    return ", ".join(parts)


def views(findings: Sequence[Mapping[str, Any]]) -> list[View]:
    """The incidents of ``findings`` (grouped afresh), in the order of their causes' steps."""
    annotated = annotate(findings)
    order = {i: k for k, i in enumerate(_order(annotated))}
    causes = sorted(
        (i for i, f in enumerate(annotated) if f["role"] == "cause"), key=order.__getitem__
    )
    members: dict[str, list[int]] = {}
    for i in sorted(range(len(annotated)), key=order.__getitem__):
        if annotated[i]["role"] == "consequence":
            members.setdefault(annotated[i]["incident"], []).append(i)
    return [
        View(
            annotated[c]["incident"],
            annotated[c],
            [annotated[i] for i in members.get(annotated[c]["incident"], [])],
        )
        for c in causes
    ]
