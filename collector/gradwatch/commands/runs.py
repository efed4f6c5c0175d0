"""``gradwatch runs``: list runs from a server, or from the local data directory."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from gradwatch.commands import Subparsers, data_dir_help
from gradwatch.core import nonfinite
from gradwatch.core.client import Api, ApiError
from gradwatch.core.contract import findings_words, status_words
from gradwatch.core.jobs import by_job

PAGE = 1000


def fetch(server: str, project: str | None, token: str | None) -> list[dict[str, Any]]:
    """Every run the server lists (all pages)."""
    runs: list[dict[str, Any]] = Api(server, token).pages("/runs", PAGE, project=project)
    return runs


def _when(t: float | str | None) -> str:
    if not isinstance(t, (int, float)):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _row(r: dict[str, Any], label: str) -> str:
    f = r["findings"]
    return (
        f"{label:<26} {r['name'][:24]:<24} {status_words(r['status'], f):<22} "
        f"{r['steps']:>7}  {findings_words(f):<30} {_when(r['started']):<16} {r['project']}"
    )


def table(runs: list[dict[str, Any]]) -> str:
    """A plain-text table, one job per line, its other ranks or processes under it."""
    head = (
        f"{'ID':<26} {'NAME':<24} {'STATUS':<22} {'STEPS':>7}  {'FINDINGS':<30} "
        f"{'STARTED':<16} PROJECT"
    )
    lines = [head]
    for lead, *rest in by_job(runs):
        more = f" (job of {len(rest) + 1} runs)" if rest else ""
        lines.append(_row(lead, lead["id"]) + more)
        for r in rest:
            rank = f"rank {r['rank']}: " if r.get("rank") is not None else ""
            lines.append(_row(r, f"  └ {rank}{r['id']}"))
    return "\n".join(lines)


def _local(args: argparse.Namespace) -> list[dict[str, Any]]:
    from gradwatch_server.cli_actions import Settings, local_runs

    return local_runs(Settings.from_env(db=args.db, data_dir=args.data_dir), args.project)


def run(args: argparse.Namespace) -> int:
    """List runs as a table or as JSON."""
    server = args.server or os.environ.get("GRADWATCH_SERVER")
    try:
        if server:
            runs = fetch(server, args.project, args.token or os.environ.get("GRADWATCH_TOKEN"))
        else:
            runs = _local(args)
    except ApiError as e:
        if not e.status:
            print(f"gradwatch runs: cannot read runs from {server}: {e.detail}", file=sys.stderr)
        else:
            print(f"gradwatch runs: {server} answered HTTP {e.status}: {e.detail}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"gradwatch runs: cannot read runs from {server}: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(
            f"gradwatch runs: without --server this needs the server package ({e}); "
            "pip install 'gradwatch[server]' or pass --server URL",
            file=sys.stderr,
        )
        return 2
    print(nonfinite.dumps(runs, indent=2) if args.json else table(runs))
    return 0


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch runs``."""
    p = sub.add_parser(
        "runs",
        help="list runs (from a server, or the local data directory)",
        description="List runs, newest first, one launch (job) per line with its other "
        "ranks or processes under it. With --server (or $GRADWATCH_SERVER) the list "
        "comes from that server; otherwise from the local database, after importing the "
        "data directory's spooled runs.",
    )
    p.add_argument("--project", help="only runs of this project")
    p.add_argument("--json", action="store_true", help="print a JSON list of run objects")
    p.add_argument("--server", help="server URL (default: $GRADWATCH_SERVER)")
    p.add_argument("--token", help="API token (default: $GRADWATCH_TOKEN)")
    p.add_argument("--db", help="local database URL (default: $GRADWATCH_DB or SQLite)")
    p.add_argument("--data-dir", help=data_dir_help())
    p.set_defaults(func=run)
