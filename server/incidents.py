"""Incidents of stored findings: regrouped in the transaction that stores new findings.

The collector sends each finding's incident as it saw it live (in arrival order); the
server regroups all of the run's findings with the same pure function
(:func:`gradwatch.checks.incidents.group`, in step order), so a cause that arrived after its
consequences still leads its incident, and every reader gets the same ids.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from gradwatch.checks.incidents import annotate, views
from gradwatch.server.crud import load_json
from gradwatch.server.models import Finding

Placed = dict[tuple[int, int], dict[str, Any]]


def _plain(f: Finding) -> dict[str, Any]:
    return {
        "check": f.check,
        "severity": f.severity,
        "step": f.step,
        "optimizer": f.optimizer,
        "param": f.param,
        "message": f.message,
        "hint": f.hint,
        "details": load_json(f.details) or {},
        "source": f.source,
        "key": (f.seq, f.idx),
    }


def regroup(session: Session, run_id: str) -> Placed:
    """Set ``incident`` and ``role`` of every finding of the run; ``(seq, idx)`` ->
    ``{incident, role, summary}`` (``summary``: the incident's one sentence now)."""
    rows = list(session.exec(select(Finding).where(col(Finding.run_id) == run_id)).all())
    plain = annotate([_plain(f) for f in rows])
    sentence = {v.id: v.sentence() for v in views(plain)}
    out: Placed = {}
    for row, f in zip(rows, plain, strict=True):
        if (row.incident, row.role) != (f["incident"], f["role"]):
            row.incident, row.role = f["incident"], f["role"]
            session.add(row)
        out[f["key"]] = {
            "incident": f["incident"],
            "role": f["role"],
            "summary": sentence.get(f["incident"]),
        }
    session.flush()
    return out
