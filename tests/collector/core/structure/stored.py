"""The structure findings a run stored, checked against those derived when read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradwatch.commands.findings import local_findings
from gradwatch.core.structure.group import derived_changes, member, run_findings
from gradwatch.core.structure.timeline import CHECK, SAFEGUARD

_SAME = ("check", "severity", "step", "message", "hint", "details")


def stored(run_dir: Path) -> list[dict[str, Any]]:
    """The structure findings the collector stored with the run, checked to be exactly
    those derived from its recorded steps when read (which readers no longer add)."""
    found = [f for f in local_findings(run_dir) if f["check"] in (CHECK, SAFEGUARD)]
    subject = member(run_dir, lambda _: False)
    assert subject.stored
    derived = derived_changes(subject)
    key = lambda f: (f["step"], f["check"], f["message"])  # noqa: E731
    assert [{k: f[k] for k in _SAME} for f in sorted(found, key=key)] == [
        {k: f[k] for k in _SAME} for f in sorted(derived, key=key)
    ]
    assert run_findings(run_dir, lambda _: False) == []  # nothing added when read
    return sorted(found, key=lambda f: int(f["step"]))
