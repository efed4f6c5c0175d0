"""``gradwatch export``: a run's steps, tensors and findings tables as files."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gradwatch.commands import Subparsers


def run(args: argparse.Namespace) -> int:
    """Write the three tables; exit 2 (writing nothing) when the run or a package is missing."""
    try:
        from gradwatch.analysis import open_run
        from gradwatch.analysis.export import check_format, write_tables

        check_format(args.format)
        data = open_run(args.run, server=args.server, token=args.token, data_dir=args.data_dir)
        out = Path(args.out or f"gradwatch-export-{data.id}")
        written = write_tables(data, args.format, out)
    except (ImportError, LookupError, PermissionError) as exc:
        print(f"gradwatch export: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        where = args.server or os.environ.get("GRADWATCH_SERVER") or "the local data directory"
        print(f"gradwatch export: cannot export the run from {where}: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch export``."""
    p = sub.add_parser(
        "export",
        help="write a run's steps, tensors and findings tables (CSV, Parquet or JSON Lines)",
        description="Write steps.EXT, tensors.EXT and findings.EXT of a run (default: the "
        "latest run in the data directory) into --out. NaN and ±Inf are kept. Parquet needs "
        "pyarrow; reading needs pandas (pip install 'gradwatch[analysis]').",
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or run folder (default: latest)")
    p.add_argument("--format", choices=("csv", "parquet", "jsonl"), default="csv")
    p.add_argument("--out", help="output folder (default: ./gradwatch-export-RUN)")
    p.add_argument("--server", help="read from this server (default: $GRADWATCH_SERVER)")
    p.add_argument("--token", help="API token (default: $GRADWATCH_TOKEN)")
    p.add_argument("--data-dir", help="data directory (default: $GRADWATCH_DIR)")
    p.set_defaults(func=run)
