"""``gradwatch findings``: a run's findings, from the local data directory or a server.

The exit status makes it a CI gate: ``gradwatch findings --fail-on error`` exits 1 when
the run has an error finding, 0 when it has none, 2 when there is no such run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from gradwatch import paths
from gradwatch.catalogue import SEVERITIES
from gradwatch.commands import Subparsers
from gradwatch.spool import list_segments, read_spool
from gradwatch.wire import Kind, from_jsonable

JSON_KEYS = (
    "run",
    "check",
    "severity",
    "step",
    "param",
    "message",
    "details",
    "source",
    "confirmed",
    "confirmed_by",
)
PAGE = 10_000  # the server's largest page


class UsageError(Exception):
    """No such run, or nothing to read: exit status 2 with the message."""


def local_findings(run_dir: Path) -> list[dict[str, Any]]:
    """Every finding spooled for the run in ``run_dir``, in the order they were stored."""
    out: list[dict[str, Any]] = []
    for frame in read_spool(run_dir).frames:
        if frame.record.kind == Kind.FINDINGS:
            out += [{"run": run_dir.name, **f} for f in frame.record.meta.get("findings", [])]
    return out


def local_run_dir(run: str | None, data_dir: str | None) -> Path:
    """The folder of ``run`` (an id or a path) or of the latest run in the data directory."""
    from gradwatch.reader import latest_run, list_runs

    root = paths.data_dir(data_dir)
    if run is None:
        try:
            return latest_run(root)
        except FileNotFoundError as exc:
            raise UsageError(
                f"{exc}; or run a script with `gradwatch run -- python train.py`"
            ) from exc
    given = Path(run)
    if given.is_dir() and list_segments(given):
        return given
    candidate = paths.runs_dir(root) / run
    if candidate.is_dir():
        return candidate
    known = [p.name for p in list_runs(root)[-5:]]
    raise UsageError(
        f"no run {run!r} in {paths.runs_dir(root)}; "
        + (f"latest runs: {', '.join(known)}" if known else "that folder holds no runs")
        + " (pass --data-dir or set GRADWATCH_DIR if the run lives elsewhere)"
    )


def _get(server: str, path: str, token: str | None, **query: Any) -> Any:
    url = f"{server.rstrip('/')}/api/v1{path}?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as reply:
        return from_jsonable(json.loads(reply.read()))  # details carry NaN as {"$f": "nan"}


def server_findings(server: str, run: str | None, token: str | None) -> list[dict[str, Any]]:
    """A run's findings from ``GET /api/v1/runs/{run}/findings`` (all pages); the newest
    run on the server when ``run`` is None."""
    try:
        if run is None:
            newest = _get(server, "/runs", token, limit=1)["data"]
            if not newest:
                raise UsageError(f"the server {server} has no runs yet")
            run = str(newest[0]["id"])
        out: list[dict[str, Any]] = []
        while True:
            page = _get(
                server,
                f"/runs/{urllib.parse.quote(run)}/findings",
                token,
                offset=len(out),
                limit=PAGE,
            )
            out += page["data"]
            if not page["data"] or len(out) >= page["count"]:
                return [{"run": run, **f} for f in out]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise UsageError(f"the server {server} has no run {run!r}") from exc
        raise


def _marked(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from gradwatch.lint.confirm import mark

    return mark(found)


def public(finding: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` form of a finding: exactly the keys of :data:`JSON_KEYS`.

    ``source`` is ``runtime`` or ``lint`` (found by ``gradwatch lint`` when ``gradwatch
    run`` started the script); ``confirmed`` is whether a lint finding was confirmed by a
    runtime finding of the run (``confirmed_by``: its check and step), None for runtime
    findings."""
    return {key: finding.get(key) for key in JSON_KEYS} | {
        "details": finding.get("details") or {},
        "source": finding.get("source") or "runtime",
    }


def line(finding: dict[str, Any]) -> str:
    """One finding as one line of text."""
    step = f"step {finding['step']}" if finding.get("step") is not None else "-"
    param = f" [{finding['param']}]" if finding.get("param") else ""
    hint = f" Fix: {finding['hint']}" if finding.get("hint") else ""
    if finding.get("source") == "lint":
        d = finding.get("details") or {}
        step = f"lint {d.get('path', '?')}:{d.get('line', '?')}"
        by = finding.get("confirmed_by")
        if by:
            hint += f" [confirmed at runtime: {by.get('check')} at step {by.get('step')}]"
    return (
        f"{finding.get('severity', '?'):<7} {finding.get('check', '?')} {step}{param}: "
        f"{finding.get('message', '')}{hint}"
    )


def counts(findings: list[dict[str, Any]]) -> dict[str, int]:
    """Findings by severity (every severity present, possibly 0)."""
    out: dict[str, int] = dict.fromkeys(SEVERITIES, 0)
    for f in findings:
        out[f.get("severity", "info")] = out.get(f.get("severity", "info"), 0) + 1
    return out


def runtime_only(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings of the runtime checks (lint findings attached to the run left out)."""
    return [f for f in findings if f.get("source") != "lint"]


def summary(run: str, findings: list[dict[str, Any]]) -> str:
    """``run ID: 1 error, 0 warnings, 2 info`` (runtime findings), then the lint findings
    attached to the run, if any: ``; lint: 2 findings, 1 confirmed at runtime``."""
    c = counts(runtime_only(findings))
    plural = "s" if c["error"] != 1 else ""
    warns = "s" if c["warning"] != 1 else ""
    text = f"run {run}: {c['error']} error{plural}, {c['warning']} warning{warns}, {c['info']} info"
    lint = [f for f in findings if f.get("source") == "lint"]
    if lint:
        confirmed = sum(bool(f.get("confirmed")) for f in lint)
        text += (
            f"; lint: {len(lint)} finding{'s' if len(lint) != 1 else ''}, "
            f"{confirmed} confirmed at runtime"
        )
    return text


def failing(findings: list[dict[str, Any]], level: str | None) -> bool:
    """Whether a runtime finding at or above ``level`` (``warning`` or ``error``) exists
    (lint findings gate in ``gradwatch lint --fail-on``, not here)."""
    if level is None:
        return False
    rank: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}
    return any(rank.get(f.get("severity", ""), -1) >= rank[level] for f in runtime_only(findings))


def run(args: argparse.Namespace) -> int:
    """Print the findings; exit 1 when one is at or above ``--fail-on``."""
    server = args.server
    try:
        if server:
            found = server_findings(
                server, args.run, args.token or os.environ.get("GRADWATCH_TOKEN")
            )
            run_id = args.run or (found[0]["run"] if found else "(latest on the server)")
        else:
            run_dir = local_run_dir(args.run, args.data_dir)
            found, run_id = local_findings(run_dir), run_dir.name
            found = _marked(found)
    except UsageError as exc:
        print(f"gradwatch findings: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as exc:
        where = server or "the local data directory"
        print(f"gradwatch findings: cannot read findings from {where}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([public(f) for f in found], indent=2))
    else:
        for f in found:
            print(line(f))
        print(summary(run_id, found))
    return 1 if failing(found, args.fail_on) else 0


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch findings``."""
    p = sub.add_parser(
        "findings",
        help="show a run's findings; --fail-on makes it a CI gate",
        description="Print the findings of a run (default: the latest run in the data "
        "directory), read from the local spool without a server, or from --server. "
        "Exit status: 1 if a finding at or above --fail-on exists, 2 if there is no such "
        "run, else 0.",
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or run folder (default: latest)")
    p.add_argument("--json", action="store_true", help="print a JSON list of findings")
    p.add_argument(
        "--fail-on",
        choices=("warning", "error"),
        help="exit 1 if a finding of this severity or worse exists",
    )
    p.add_argument(
        "--server",
        help="read from this server's API instead of the local data directory",
    )
    p.add_argument("--token", help="API token (default: $GRADWATCH_TOKEN)")
    p.add_argument("--data-dir", help="data directory (default: $GRADWATCH_DIR)")
    p.set_defaults(func=run)
