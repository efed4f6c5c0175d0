"""``gradwatch sync``: send spooled runs that the server never acknowledged."""

from __future__ import annotations

import argparse
import os
import sys

from gradwatch.commands import Subparsers
from gradwatch.core import paths
from gradwatch.core.errors import ConfigError


def run(args: argparse.Namespace) -> int:
    """Send every run's unacknowledged frames; exit 1 if some run is incomplete."""
    from gradwatch.transport import sender

    server = args.server or os.environ.get("GRADWATCH_SERVER")
    if not server:
        print(
            "gradwatch sync: no server given; pass --server http://HOST:PORT or set "
            "GRADWATCH_SERVER",
            file=sys.stderr,
        )
        return 2
    root = paths.data_dir(args.data_dir)
    if not paths.runs_dir(root).is_dir():
        print(f"gradwatch sync: no runs in {root} (nothing to send)")
        return 0

    def progress(result: sender.SyncResult) -> None:
        if args.quiet:
            return
        state = (
            ("rejected: " + (result.error or ""))
            if result.rejected
            else ("done" if result.complete else "sending")
        )
        print(
            f"  run {result.run}: sent {result.sent} frames "
            f"({result.already_acked} already acknowledged) — {state}",
            flush=True,
        )

    print(f"gradwatch sync: {root} -> {server}")
    try:
        results = sender.sync_all(
            root, server, token=args.token, progress=progress, max_attempts=args.attempts
        )
    except ConfigError as exc:
        print(f"gradwatch sync: {exc}", file=sys.stderr)
        return 2
    incomplete = [r for r in results if not r.complete]
    for r in incomplete:
        print(
            f"gradwatch sync: run {r.run} not fully sent: {r.error or 'server unreachable'}; "
            "run `gradwatch sync` again once the server is reachable",
            file=sys.stderr,
        )
    print(
        f"gradwatch sync: {len(results) - len(incomplete)}/{len(results)} runs complete, "
        f"{sum(r.sent for r in results)} frames sent"
    )
    return 1 if incomplete else 0


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch sync``."""
    p = sub.add_parser(
        "sync",
        help="send spooled runs that the server never acknowledged",
        description="Send every frame of every run in the data directory that "
        "the server has not acknowledged yet (safe to repeat: the server "
        "deduplicates). Exit status 1 if some run could not be sent completely.",
    )
    p.add_argument("--server", help="server URL (default: $GRADWATCH_SERVER)")
    p.add_argument(
        "--data-dir", help="data directory (default: $GRADWATCH_DIR or ~/.local/share/gradwatch)"
    )
    p.add_argument("--token", help="API token (default: $GRADWATCH_TOKEN)")
    p.add_argument(
        "--attempts",
        type=int,
        default=4,
        metavar="N",
        help="give a run up after N failed requests in a row (default 4, with "
        "exponential backoff between them)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no per-run progress lines")
    p.set_defaults(func=run)
