"""``gradwatch findings``: a run's findings, from the local data directory or a server.

Without RUN it reads every run of the latest job: all ranks and processes that the last
``gradwatch run`` invocation (or torchrun launch) started (:mod:`gradwatch.core.jobs`).
The exit status makes it a CI gate: ``gradwatch findings --fail-on error`` exits 1 when one
of those runs has an error finding, 0 when none has, 2 when there is no such run. Findings
are shown by incident (:mod:`gradwatch.core.incidents`): one sentence naming the root
cause, then the findings that are its evidence.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

from gradwatch.commands import Subparsers, data_dir_help
from gradwatch.commands._crossrun import cross_run_findings
from gradwatch.core import jobs, nonfinite, paths
from gradwatch.core.client import Api, NotFoundError
from gradwatch.core.contract import SEVERITIES
from gradwatch.core.incidents import annotate, evidence, views
from gradwatch.core.records import decode
from gradwatch.core.spool import list_segments, read_spool
from gradwatch.core.wire import Kind

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
    "incident",
    "role",
)
PAGE = 10_000  # the server's largest page of findings
RUNS_PAGE = 1000  # and of runs


class UsageError(Exception):
    """No such run, or nothing to read: exit status 2 with the message."""


def local_findings(run_dir: Path) -> list[dict[str, Any]]:
    """Every finding spooled for the run in ``run_dir``, in the order they were stored."""
    spooled = decode(read_spool(run_dir).frames, only={Kind.FINDINGS}).findings
    return [{"run": run_dir.name, **f} for f in spooled]


def _has_error(run_dir: Path) -> bool:
    return any(f.get("severity") == "error" for f in local_findings(run_dir))


def structure_findings(run_dir: Path) -> list[dict[str, Any]]:
    """Where the run's structure changes for good (info) and where it breaks what held in
    every good run of its replicate group in the same data directory (warnings):
    :mod:`gradwatch.core.structure`. The changes are stored with the run's findings by the
    collector (its END record says so), so they are derived here only for a run without
    them (an earlier collector's, or one that never closed); the group's are always
    derived here (they need the other runs)."""
    from gradwatch.core.structure.group import run_findings

    try:
        return run_findings(run_dir, _has_error)
    except (IndexError, KeyError, TypeError, ValueError) as exc:  # a damaged or foreign spool
        print(f"gradwatch findings: structure of {run_dir.name} not read: {exc!r}", file=sys.stderr)
        return []


def local_run_dirs(run: str | None, data_dir: str | None) -> list[Path]:
    """The folder of ``run`` (an id, a name, a prefix of either, or a path), or every run of
    the latest job."""
    root = paths.data_dir(data_dir)
    if run is None:
        latest = jobs.latest_job(root)
        if not latest:
            raise UsageError(
                f"no runs in {paths.runs_dir(root)}; train with gradwatch.watch(...) first, or "
                "run a script with `gradwatch run -- python train.py` (or pass --data-dir / "
                "set GRADWATCH_DIR)"
            )
        return latest
    given = Path(run)
    if given.is_dir() and list_segments(given):
        return [given]
    candidate = paths.runs_dir(root) / run
    if candidate.is_dir():
        return [candidate]
    return [_by_name(root, run)]


def _by_name(root: Path, run: str) -> Path:
    """The run folder whose name or id is ``run`` (the newest of several runs sharing a
    name) or starts with it (one run only); ``UsageError`` listing the candidates."""
    from gradwatch.core.local_reader import list_runs

    found, how = jobs.resolve(root, run)
    if how == "exact":
        if len(found) > 1:
            print(
                f"gradwatch: {len(found)} runs are named {run!r}; reading the newest, "
                f"{found[-1].dir.name} (pass an id for another)",
                file=sys.stderr,
            )
        return found[-1].dir
    if len(found) == 1:
        return found[0].dir
    if found:
        listed = ", ".join(f"{r.name} ({r.dir.name})" for r in found[-8:])
        raise UsageError(
            f"{run!r} matches {len(found)} runs: {listed}; pass more of the name or the id"
        )
    known = [f"{r.name} ({r.dir.name})" for r in jobs.recent_runs(root)[-5:]]
    if not known:
        known = [p.name for p in list_runs(root)[-5:]]
    raise UsageError(
        f"no run {run!r} in {paths.runs_dir(root)}; "
        + (f"latest runs: {', '.join(known)}" if known else "that folder holds no runs")
        + " (pass --data-dir or set GRADWATCH_DIR if the run lives elsewhere)"
    )


def local_run_dir(run: str | None, data_dir: str | None) -> Path:
    """The folder of ``run``, or of the latest job's first run (rank 0)."""
    return local_run_dirs(run, data_dir)[0]


def _one_run(api: Api, run: str) -> list[dict[str, Any]]:
    found = api.pages(f"/runs/{urllib.parse.quote(run)}/findings", PAGE)
    return [{**f, "run": run} for f in found]


STRUCTURE_PAGE = 1000  # the server's largest page of structure findings


def _structure(api: Api, run: str) -> list[dict[str, Any]]:
    """The run's structure findings as the server derives them (``GET
    /runs/{run}/structure``, every page): what ``structure_findings`` derives locally.
    None from a server without that route (it answers 404 for a run it has)."""
    try:
        found = api.pages(f"/runs/{urllib.parse.quote(run)}/structure", STRUCTURE_PAGE)
    except NotFoundError:
        return []
    return [{**f, "run": run} for f in found]


def server_runs(api: Api, run: str | None) -> list[str]:
    """``[run]``, or every run of the newest run's job (all its ranks and processes)."""
    if run is not None:
        return [run]
    newest = api.get("/runs", limit=1)["data"]
    if not newest:
        raise UsageError(f"the server {api.base_url} has no runs yet")
    job = newest[0].get("job")
    if not job:  # a server without jobs
        return [str(newest[0]["id"])]
    members = api.get("/runs", job=job, limit=RUNS_PAGE)["data"] or newest
    order = sorted(members, key=lambda r: (r.get("rank") or 0, r.get("started") or 0.0))
    return [str(r["id"]) for r in order]


def server_findings(server: str, run: str | None, token: str | None) -> dict[str, list[Any]]:
    """Findings by run from ``GET /api/v1/runs/{run}/findings`` and the structure
    findings the server derives (``GET /api/v1/runs/{run}/structure``), all pages; the
    newest run's job when ``run`` is None."""
    api = Api(server, token)
    try:
        return {r: _unstored(_one_run(api, r), _structure(api, r)) for r in server_runs(api, run)}
    except NotFoundError as exc:
        raise UsageError(f"the server {server} has no run {run!r}") from exc


def _unstored(
    stored: list[dict[str, Any]], structure: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``stored`` and those of ``structure`` not among them: the server's structure reply
    carries the changes the collector stored too (its timeline shows them all)."""
    have = {(f.get("check"), f.get("step"), f.get("message")) for f in stored}
    return stored + [
        f for f in structure if (f.get("check"), f.get("step"), f.get("message")) not in have
    ]


def _marked(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from gradwatch.core.confirm import mark

    return mark(found)


def public(finding: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` form of a finding: exactly the keys of :data:`JSON_KEYS`.

    ``source`` is ``runtime`` or ``lint`` (found by ``gradwatch lint`` when ``gradwatch
    run`` started the script); ``confirmed`` is whether a lint finding was confirmed by a
    runtime finding of the run (``confirmed_by``: its check and step), None for runtime
    findings; ``incident`` and ``role`` (``cause`` or ``consequence``) group the findings
    that follow from one root cause."""
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
    elif finding.get("role") == "consequence":
        hint = ""  # the fix is the cause's
    return (
        f"{finding.get('severity', '?'):<7} {finding.get('check', '?')} {step}{param}: "
        f"{evidence(finding)}{hint}"
    )


def incident_lines(findings: list[dict[str, Any]]) -> list[str]:
    """One sentence per incident naming its root cause, its findings indented under it;
    lint findings (about the code, not an onset) one line each, last."""
    out: list[str] = []
    for view in views(findings):
        if view.cause.get("source") == "lint":
            out += [line(f) for f in view.findings]
            continue
        out.append(f"{view.severity:<7} incident {view.id}: {view.sentence()}")
        out += ["  " + line(f) for f in view.findings]
    return out


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
    """``run ID: 1 error, 0 warnings, 2 info in 1 incident`` (runtime findings), then the
    lint findings attached to the run, if any: ``; lint: 2 findings, 1 confirmed at
    runtime``."""
    runtime = runtime_only(findings)
    c = counts(runtime)
    plural = "s" if c["error"] != 1 else ""
    warns = "s" if c["warning"] != 1 else ""
    text = f"run {run}: {c['error']} error{plural}, {c['warning']} warning{warns}, {c['info']} info"
    incidents = len({f.get("incident") for f in runtime if f.get("incident")})
    if incidents:
        text += f" in {incidents} incident{'s' if incidents != 1 else ''}"
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


def collect(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Findings by run (one run, or every run of the latest job), grouped in incidents."""
    if args.server:
        by_run = server_findings(
            args.server, args.run, args.token or os.environ.get("GRADWATCH_TOKEN")
        )
    else:
        dirs = local_run_dirs(args.run, args.data_dir)
        by_run = {
            d.name: _marked(local_findings(d) + cross_run_findings(d) + structure_findings(d))
            for d in dirs
        }
    # regrouped here, so spooled runs and servers of any version read the same
    return {run: annotate(found) for run, found in by_run.items()}


def run(args: argparse.Namespace) -> int:
    """Print the findings; exit 1 when one is at or above ``--fail-on``."""
    try:
        by_run = collect(args)
    except UsageError as exc:
        print(f"gradwatch findings: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as exc:
        where = args.server or "the local data directory"
        print(f"gradwatch findings: cannot read findings from {where}: {exc}", file=sys.stderr)
        return 2
    found = [f for fs in by_run.values() for f in fs]
    if args.json:
        print(nonfinite.dumps([public(f) for f in found], indent=2))
    else:
        for run_id, fs in by_run.items():
            print("\n".join([*incident_lines(fs), summary(run_id, fs)]))
    return 1 if failing(found, args.fail_on) else 0


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch findings``."""
    p = sub.add_parser(
        "findings",
        help="show a run's findings; --fail-on makes it a CI gate",
        description="Print the findings of a run by incident (default: the latest job in the "
        "data directory), read from the local spool without a server, or from --server. "
        "Without RUN, every run of the latest job (all ranks and processes the last "
        "`gradwatch run` started). Exit status: 1 if a finding at or above --fail-on exists, "
        "2 if there is no such run, else 0.",
    )
    p.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="run id or run folder (default: every run of the latest job)",
    )
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
    p.add_argument("--data-dir", help=data_dir_help())
    p.set_defaults(func=run)
