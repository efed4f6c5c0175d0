"""Lint findings confirmed at runtime: a run's lint finding is *confirmed* once the run
has a runtime finding of a check listed in the rule's ``confirmed_by`` (same id for the
rules named after a runtime check). Used by ``gradwatch findings`` and the server's
findings API, so both answer the same."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gradwatch.core.lint_catalogue import BY_ID, confirms


def confirming_checks(rules: Iterable[str]) -> set[str]:
    """Runtime check ids that can confirm any of ``rules``."""
    return {c for r in rules if r in BY_ID for c in BY_ID[r].confirmed_by}


def confirmation(rule: str, runtime: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"check", "step"}`` of the earliest runtime finding confirming ``rule``, or None."""
    hits = [r for r in runtime if confirms(rule, r)]
    if not hits:
        return None
    first = min(hits, key=lambda r: (r.get("step") is None, r.get("step") or 0))
    return {"check": first.get("check"), "step": first.get("step")}


def mark(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each finding with ``confirmed`` (bool for lint findings, None for runtime ones) and
    ``confirmed_by`` added, judged against the runtime findings in the same list."""
    runtime = [f for f in findings if f.get("source", "runtime") == "runtime"]
    out = []
    for f in findings:
        if f.get("source") == "lint":
            by = confirmation(str(f.get("check")), runtime)
            out.append({**f, "confirmed": by is not None, "confirmed_by": by})
        else:
            out.append({**f, "confirmed": None, "confirmed_by": None})
    return out
