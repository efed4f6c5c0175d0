"""``gradwatch lint PATH...``: static checks for silent training bugs (no torch import).

Exit status: 1 when a finding at or above ``--fail-on`` (default ``error``) is reported,
2 when a path is missing, a file cannot be parsed or a rule id is unknown, else 0.
"""

from __future__ import annotations

import argparse
import sys

from gradwatch.commands import Subparsers


def run(args: argparse.Namespace) -> int:
    """Lint the paths; print findings in the chosen format."""
    from gradwatch.lint import RULES, SelectionError, enabled_rules, lint_paths
    from gradwatch.lint import report as fmt

    if args.list_rules:
        for r in RULES:
            print(f"{r.id:<30} {r.severity:<8} {r.title}")
        return 0
    if not args.paths:
        print("gradwatch lint: give at least one file or folder", file=sys.stderr)
        return 2
    try:
        enabled = enabled_rules(args.select, args.ignore)
        # a rule named in --select is wanted: its info findings are reported as warnings
        result = lint_paths(args.paths, enabled, enabled if args.select else None)
    except (SelectionError, FileNotFoundError) as exc:
        print(f"gradwatch lint: {exc}", file=sys.stderr)
        return 2
    for error in result.errors:
        print(f"gradwatch lint: {error}", file=sys.stderr)
    shown = result.shown(args.show_suppressed or args.format == "sarif")
    if args.format == "json":
        print(fmt.as_json(shown))
    elif args.format == "sarif":
        print(fmt.sarif(shown))
    else:
        print(fmt.text(result, shown))
    if result.errors:
        return 2
    rank = {"warning": 1, "error": 2}
    level = rank[args.fail_on]
    failing = [f for f in shown if not f.suppressed and rank.get(f.severity, 0) >= level]
    return 1 if failing else 0


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch lint``."""
    p = sub.add_parser(
        "lint",
        help="static checks for silent training bugs (CI, pre-commit)",
        description="Check Python files and folders for training-loop bugs that do not "
        "crash: missing or misplaced zero_grad, broken gradient accumulation, a model "
        "left in eval mode, a loss cut from the graph, softmax into CrossEntropyLoss... "
        "Silence one finding with `# gradwatch: ignore[RULE]` on its line or on the loop's "
        "line. Exit status: 1 if a finding at or above --fail-on exists, 2 on a usage or "
        "parse error, else 0.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="Python files or folders")
    p.add_argument(
        "--format", choices=("text", "json", "sarif"), default="text", help="output format"
    )
    p.add_argument(
        "--fail-on",
        choices=("warning", "error"),
        default="error",
        help="exit 1 if a finding of this severity or worse exists (default: error)",
    )
    p.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="IDS",
        help="only these rule ids (comma-separated, repeatable; default: all); a rule "
        "named here that reports info by default (unseeded-run) reports warnings",
    )
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="IDS",
        help="skip these rule ids (comma-separated, repeatable)",
    )
    p.add_argument(
        "--show-suppressed",
        action="store_true",
        help="also list findings silenced by `# gradwatch: ignore[...]` (never failing)",
    )
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    p.set_defaults(func=run)
