"""Incidents of stored findings: regrouped in the transaction that stores new findings.

The collector sends each finding's incident as it saw it live (in arrival order); the
server regroups all of the run's findings with the same pure function
(:func:`gradwatch.core.incidents.group`, in step order), so a cause that arrived after its
consequences still leads its incident, and every reader gets the same ids.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from gradwatch.core.incidents import annotate, views
from gradwatch_server.jsontext import load_json
from gradwatch_server.store import run_sql

Placed = dict[tuple[int, int], dict[str, Any]]

#: the columns a regroup reads, in plain SQL (no ORM objects: a run's first request and
#: every request with findings regroup, and loading and flushing ``Finding`` objects cost
#: more than the grouping)
_FINDINGS = (
    'SELECT seq, idx, "check", severity, step, optimizer, param, message, hint, details, '
    "source, incident, role FROM findings WHERE run_id = ?"
)
_SET = "UPDATE findings SET incident = ?, role = ? WHERE run_id = ? AND seq = ? AND idx = ?"


def _plain(row: tuple[Any, ...]) -> dict[str, Any]:
    seq, idx, check, severity, step, optimizer, param, message, hint, details, source = row[:11]
    return {
        "check": check,
        "severity": severity,
        "step": step,
        "optimizer": optimizer,
        "param": param,
        "message": message,
        "hint": hint,
        "details": load_json(details) or {},
        "source": source,
        "key": (int(seq), int(idx)),
    }


def regroup(session: Session, run_id: str) -> Placed:
    """Set ``incident`` and ``role`` of every finding of the run; ``(seq, idx)`` ->
    ``{incident, role, summary}`` (``summary``: the incident's one sentence now)."""
    session.flush()  # the plain SQL below sees what the session holds
    rows = run_sql(session, _FINDINGS, (run_id,))
    plain = annotate([_plain(row) for row in rows])
    sentence = {v.id: v.sentence() for v in views(plain)}
    out: Placed = {}
    changed: list[tuple[Any, ...]] = []
    for row, f in zip(rows, plain, strict=True):
        if (row[11], row[12]) != (f["incident"], f["role"]):
            changed.append((f["incident"], f["role"], run_id, *f["key"]))
        out[f["key"]] = {
            "incident": f["incident"],
            "role": f["role"],
            "summary": sentence.get(f["incident"]),
        }
    if changed:
        run_sql(session, _SET, changed, many=True)
    return out
