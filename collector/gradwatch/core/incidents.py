"""Incidents: the findings that follow from one onset, with one root cause named.

A finding is either the ``cause`` of its incident or a ``consequence`` of an earlier
finding's cause. :func:`group` is a pure function of the findings (dicts in the wire form
of :meth:`gradwatch.checks.findings.Finding.to_meta`) used by the collector while a run goes
(:class:`Grouper`, in arrival order) and by every reader of stored findings (CLI, server,
dashboard), in step order. The rules are the checks' own (each declares its
:class:`~gradwatch.core.registry.Cause` in its family's module of :mod:`gradwatch.core.checks`),
ordered by precedence: the first rule whose cause is open and
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

from gradwatch.core.checkids import LR_TOO_LARGE, UPDATE_RATIO
from gradwatch.core.checks import REGISTRY
from gradwatch.core.registry import UNBOUNDED as UNBOUNDED
from gradwatch.core.registry import Registry
from gradwatch.core.registry import Rule as Rule

Role = Literal["cause", "consequence"]


class RuleBook:
    """The incident rules of a registry (each check's :class:`~gradwatch.core.registry.Cause`,
    ordered by precedence: an earlier rule wins when two open causes could claim a finding),
    with their lookups. :data:`BOOK` is the registry's; a test may build one from a registry
    with a throwaway family."""

    def __init__(self, registry: Registry) -> None:
        self.rules: tuple[Rule, ...] = registry.rules
        self.by_kind: dict[str, Rule] = {r.kind: r for r in self.rules}
        self.rank: dict[str, int] = {r.kind: i for i, r in enumerate(self.rules)}
        #: the checks of a non-finite value: findings of the ``nonfinite`` cause kind
        self.nonfinite: frozenset[str] = registry.showing("nonfinite")


BOOK: Final = RuleBook(REGISTRY)
#: Ordered: an earlier rule wins when two open causes could claim a finding.
RULES: Final[tuple[Rule, ...]] = BOOK.rules


def kind_of(finding: Mapping[str, Any], book: RuleBook = BOOK) -> str | None:
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
    if check in book.nonfinite:
        return "nonfinite"
    if check == UPDATE_RATIO and isinstance(details, Mapping) and details.get("from_start"):
        # updates larger than the weights from the optimizer's first one: no gradient grew
        # to make them so; the learning rate did (`update-ratio`'s ``from_start``)
        return LR_TOO_LARGE if LR_TOO_LARGE in book.by_kind else None
    return check if check in book.by_kind else None


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

    def __init__(self, book: RuleBook = BOOK) -> None:
        self.book = book
        self.incidents: dict[str, Incident] = {}
        self._open: list[Incident] = []

    def add(self, finding: Mapping[str, Any]) -> tuple[str, Role]:
        """The incident and role of ``finding`` given every finding added before it."""
        owner = self._owner(finding) or self.incidents.get(incident_id(finding))
        kind, step = kind_of(finding, self.book), _step(finding)
        if owner is not None:  # a consequence, or the same onset on another tensor
            owner.consequences += 1
            if kind in self.book.by_kind and step is not None and (kind, step) not in owner.spans:
                owner.spans.append((kind, step))  # it explains what its member would
            return owner.id, "consequence"
        incident = Incident(incident_id(finding), kind, step)
        self.incidents[incident.id] = incident
        if kind in self.book.by_kind and step is not None:
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
                rule = self.book.by_kind[kind]
                if check not in rule.consequences:
                    continue
                if not at - rule.lead <= step <= at + rule.window:
                    continue
                rank = self.book.rank[kind]
                if best is None or rank < best[0]:
                    best = (rank, incident)
        return best[1] if best else None


def _order(findings: Sequence[Mapping[str, Any]], book: RuleBook) -> list[int]:
    """Step order; at one step, causes of earlier rules first, then arrival order."""

    def key(i: int) -> tuple[int, int, int]:
        step = _step(findings[i])
        kind = kind_of(findings[i], book)
        rule = book.by_kind.get(kind or "")
        at = UNBOUNDED if step is None else step - (rule.lead if rule else 0)
        return (at, book.rank.get(kind or "", len(book.rules)), i)

    return sorted(range(len(findings)), key=key)


def group(findings: Sequence[Mapping[str, Any]], book: RuleBook = BOOK) -> list[tuple[str, Role]]:
    """``(incident, role)`` of every finding, in the input's order."""
    grouper = Grouper(book)
    out: list[tuple[str, Role]] = [("", "cause")] * len(findings)
    for i in _order(findings, book):
        out[i] = grouper.add(findings[i])
    return out


def annotate(findings: Iterable[Mapping[str, Any]], book: RuleBook = BOOK) -> list[dict[str, Any]]:
    """Copies of ``findings`` with ``incident`` and ``role`` set by :func:`group`."""
    items = list(findings)
    grouped = group(items, book)
    return [{**f, "incident": i, "role": r} for f, (i, r) in zip(items, grouped, strict=True)]


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


def views(findings: Sequence[Mapping[str, Any]], book: RuleBook = BOOK) -> list[View]:
    """The incidents of ``findings`` (grouped afresh), in the order of their causes' steps."""
    annotated = annotate(findings, book)
    order = {i: k for k, i in enumerate(_order(annotated, book))}
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
