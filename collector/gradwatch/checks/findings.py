"""Findings: what a check reports, and what its policy does with it.

A finding is stored with the run (a FINDINGS record in the spool, hence on the server) at
the *onset* of a condition; while the same condition persists for the same check and
tensor it is not stored again. ``warn``, ``raise`` and ``skip`` also print one line to
stderr (at most ``MAX_LINES_PER_CHECK`` per check for the run); ``raise``, ``checkpoint``
and ``skip`` act every time the condition holds, not only at its onset. ``checkpoint``
saves the last good state first (:mod:`gradwatch.hooks.checkpoint_policy`) and names it in
the finding.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gradwatch.core.catalogue import CHECKS, Policy
from gradwatch.core.contract import FindingsMeta, Severity
from gradwatch.core.errors import IntegrityError
from gradwatch.core.incidents import Grouper, Role, evidence
from gradwatch.core.wire import Kind, Record

Action = Literal["none", "skip", "raise"]
MAX_LINES_PER_CHECK = 10
MAX_KEPT = 10_000  # findings kept in memory on the run object
LISTED = 4  # tensors named in a finding that lists many (the rest are counted)


def listing(names: Sequence[str], limit: int = LISTED) -> str:
    """``a, b, c, d and 12 more``: the first ``limit`` names, then how many others."""
    shown = ", ".join(names[:limit])
    more = len(names) - limit
    return f"{shown} and {more} more" if more > 0 else shown


#: the fields of a finding on the wire, in their order there
_WIRE_FIELDS = (
    "check",
    "severity",
    "step",
    "optimizer",
    "param",
    "message",
    "hint",
    "details",
    "source",
    "t",
    "incident",
    "role",
)


@dataclass(frozen=True)
class Finding:
    """One problem found by one check."""

    check: str
    severity: Severity
    step: int | None
    message: str
    hint: str
    param: str | None = None
    optimizer: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    source: str = "runtime"
    t: float = field(default_factory=time.time)
    #: the incident this finding belongs to, and whether it is its cause (set when stored)
    incident: str | None = None
    role: Role | None = None

    def to_meta(self) -> dict[str, Any]:
        """The wire form (a FINDINGS record carries a list of these)."""
        return {name: getattr(self, name) for name in _WIRE_FIELDS}

    def line(self) -> str:
        """The one line printed on stderr; a consequence is indented under its cause and
        names it instead of a fix (the fix is the cause's)."""
        where = f" ({self.param})" if self.param else ""
        step = f" at step {self.step}" if self.step is not None else ""
        if self.role == "consequence":
            return (
                f"gradwatch:   then [{self.severity}] {self.check}{step}{where}: "
                f"{evidence(self.to_meta())} (a consequence of {self.incident})"
            )
        fix = f" Fix: {self.hint}" if self.hint else ""  # a structure change: no fix
        return f"gradwatch: [{self.severity}] {self.check}{step}{where}: {self.message}{fix}"


def finding(
    check: str,
    step: int | None,
    message: str,
    hint: str,
    *,
    severity: Severity | None = None,
    **kwargs: Any,
) -> Finding:
    """A finding with the check's default severity unless one is given."""
    return Finding(
        check=check,
        severity=severity or CHECKS[check],
        step=step,
        message=message,
        hint=hint,
        **kwargs,
    )


class FindingSink:
    """Applies policies: stores at onset, prints, and tells the caller to skip or raise."""

    def __init__(
        self,
        policy: Callable[[str], Policy],
        submit: Callable[[Record], None],
        write: Callable[[str], Any] | None = None,
    ) -> None:
        self._policy = policy
        self._submit = submit
        self._write = write
        self._lock = threading.Lock()
        self._active: set[tuple[str, str | None, int | None, str]] = set()
        self._lines: dict[str, int] = {}
        self._pending: list[Finding] = []
        self._incidents = Grouper()
        self.findings: list[Finding] = []
        #: policy ``checkpoint``: saves the last good state, returns where (set by the run)
        self.checkpoint: Callable[[Finding], str] | None = None
        #: optimizer index -> the script's variable for it (set at attach): a stored
        #: finding says ```optimizerG``` where it said ``optimizer 1``
        self.optimizer_names: dict[int, str] = {}
        #: adds what is known about the finding's step (the outlier input batch of
        #: :mod:`gradwatch.checks.batchscale`) before it is stored (set by the check engine)
        self.annotate: Callable[[Finding], Finding] | None = None

    def enabled(self, check: str) -> bool:
        """Whether ``check`` is evaluated at all (policy not ``off``)."""
        return self._policy(check) != "off"

    def wants_action(self, check: str) -> bool:
        """Whether the policy of ``check`` acts on training (raise, checkpoint or skip)."""
        return self._policy(check) in ("raise", "skip", "checkpoint")

    def report(self, f: Finding) -> Action:
        """Handle a condition that holds now; returns what the caller must do."""
        policy = self._policy(f.check)
        if policy == "off":
            return "none"
        if self.annotate is not None:
            f = self.annotate(f)
        if policy == "checkpoint":
            f = self._save(f)
        key = (f.check, f.param, f.optimizer, f.severity)
        with self._lock:
            onset = key not in self._active
            if onset:
                self._active.add(key)
                if self.optimizer_names:
                    f = _named(f, self.optimizer_names)
                f = self._store(f)
                if policy != "record":
                    self._print(f)
        if policy in ("raise", "checkpoint"):
            self.flush()
            raise IntegrityError(f.line().removeprefix("gradwatch: ").strip())
        return "skip" if policy == "skip" else "none"

    def _save(self, f: Finding) -> Finding:
        """Policy ``checkpoint``: save the state before the update, name it in the finding.
        A failed save is reported in the finding; the policy still raises."""
        if self.checkpoint is None:
            return f
        try:
            path = self.checkpoint(f)
        except Exception as exc:
            details = {**f.details, "checkpoint_error": f"{type(exc).__name__}: {exc}"}
            return dataclasses.replace(f, details=details)
        return dataclasses.replace(
            f,
            message=f"{f.message} Last good state saved to {path}.",
            details={**f.details, "checkpoint": path},
        )

    def holds_any(self, checks: frozenset[str]) -> bool:
        """Whether a condition of one of ``checks`` holds now (for any tensor)."""
        return bool(self._active) and any(k[0] in checks for k in self._active)

    def active(self, check: str, optimizer: int | None = None) -> set[str | None]:
        """Tensors for which ``check`` currently holds (to clear only those, cheaply)."""
        if not self._active:
            return set()
        return {k[1] for k in self._active if k[0] == check and k[2] == optimizer}

    def episode(self, check: str, optimizer: int | None, bad: Sequence[str]) -> str | None:
        """One finding per episode of a per-tensor condition (a per-step cascade across
        tensors is one finding): the tensor that keys ``check``'s open episode for
        ``optimizer`` — the first of ``bad`` at its onset, kept while any tensor is bad, so
        tensors that join it add no finding — or ``None`` when none is bad (the episode
        ends; the next onset is a new finding). Report the episode's finding with
        ``param`` set to the returned tensor, listing ``bad``."""
        if not bad:
            self.settle(check, optimizer, set())
            return None
        opened = sorted(p for p in self.active(check, optimizer) if p is not None)
        key = opened[0] if opened else bad[0]
        self.settle(check, optimizer, {key})
        return key

    def settle(self, check: str, optimizer: int | None, still_bad: set[str]) -> None:
        """Clear ``check`` for every tensor of ``optimizer`` that is no longer bad."""
        for name in self.active(check, optimizer) - still_bad:
            self.clear(check, name, optimizer)

    def clear(self, check: str, param: str | None = None, optimizer: int | None = None) -> None:
        """The condition no longer holds: its next onset is a new finding."""
        if not self._active:
            return  # the common case: nothing to clear
        with self._lock:
            for severity in ("info", "warning", "error"):
                self._active.discard((check, param, optimizer, severity))

    def flush(self) -> None:
        """Queue the findings stored since the last flush as one FINDINGS record."""
        if not self._pending:
            return
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            meta: FindingsMeta = {"findings": [f.to_meta() for f in pending]}
            self._submit(Record(Kind.FINDINGS, dict(meta)))

    def _store(self, f: Finding) -> Finding:
        """Keep ``f`` with its incident (in arrival order; readers regroup in step order)."""
        incident, role = self._incidents.add(f.to_meta())
        f = dataclasses.replace(f, incident=incident, role=role)
        self._pending.append(f)
        if len(self.findings) < MAX_KEPT:
            self.findings.append(f)
        return f

    def _print(self, f: Finding) -> None:
        count = self._lines.get(f.check, 0)
        if count < MAX_LINES_PER_CHECK:
            self._lines[f.check] = count + 1
            suffix = (
                " (further lines of this check are not printed)"
                if (count + 1 == MAX_LINES_PER_CHECK)
                else ""
            )
            # sys.stderr is looked up now, not at import: it may have been redirected since
            (self._write or sys.stderr.write)(f.line() + suffix + "\n")


_OPTIMIZER = re.compile(r"\boptimizer (\d+)\b")


def _named(f: Finding, names: dict[int, str]) -> Finding:
    """``f`` with ``optimizer N`` in its words replaced by the script's variable for it."""

    def name(m: re.Match[str]) -> str:
        found = names.get(int(m.group(1)))
        return m.group(0) if found is None else f"`{found}`"

    return dataclasses.replace(
        f, message=_OPTIMIZER.sub(name, f.message), hint=_OPTIMIZER.sub(name, f.hint)
    )
