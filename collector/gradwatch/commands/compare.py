"""``gradwatch compare RUN_A RUN_B``: did two runs agree, and if not, where and why.

Reads both runs from the local data directory (no server needed) or, with ``--server``,
asks the server's ``GET /api/v1/compare``. Exit status: 0 identical, 1 diverged or not
comparable, 2 no such run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from gradwatch.commands import Subparsers, data_dir_help

JSON_KEYS = (
    "a",
    "b",
    "verdict",
    "step",
    "metric",
    "param",
    "optimizer",
    "cause",
    "difference",
    "message",
    "exact",
    "tolerance",
    "steps_compared",
    "fingerprint_diff",
    "per_tensor",
)


def local_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Both runs from the data directory, compared in this process."""
    from gradwatch.commands.findings import local_run_dir
    from gradwatch.core.drift.verdict import compare, from_local
    from gradwatch.core.local_reader import load_run

    runs = [from_local(load_run(local_run_dir(r, args.data_dir))) for r in (args.run_a, args.run_b)]
    return compare(runs[0], runs[1], rtol=args.rtol, atol=args.atol)


def server_compare(args: argparse.Namespace) -> dict[str, Any]:
    """The server's comparison of the two runs."""
    from gradwatch.commands.findings import UsageError
    from gradwatch.core.client import SLOW_TIMEOUT, Api, NotFoundError

    query = {"a": args.run_a, "b": args.run_b}
    query |= {k: str(v) for k, v in (("rtol", args.rtol), ("atol", args.atol)) if v is not None}
    api = Api(args.server, args.token or os.environ.get("GRADWATCH_TOKEN"), SLOW_TIMEOUT)
    try:
        result: dict[str, Any] = api.get("/compare", **query)
    except NotFoundError as exc:
        raise UsageError(f"the server {args.server}: {exc.detail or 'no such run'}") from exc
    return result


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def text(result: dict[str, Any]) -> str:
    """The human form: verdict, where, why, the fingerprint differences, the worst layers."""
    lines = [f"{result['verdict']}: {result['a']} vs {result['b']}", f"  {result['message']}"]
    if result["verdict"] == "diverged":
        lines.append(
            f"  step {result['step']}  metric {result['metric']}  tensor "
            f"{result['param'] or '-'}  cause {result['cause']}"
        )
        lines += _difference(result.get("difference") or {})
    tol = result["tolerance"]
    lines.append(
        "  tolerance: exact (the fingerprints say bit-identical)"
        if result["exact"]
        else f"  tolerance: rtol {tol['rtol']:g}, atol {tol['atol']:g}"
    )
    # RNG-state hashes differ between processes whenever a library seeds itself from the
    # OS (Python's random, numpy): evidence for --json, noise in the summary.
    states = [d for d in result["fingerprint_diff"] if d["field"].endswith("_state_sha256")]
    shown = [d for d in result["fingerprint_diff"] if d not in states]
    if shown:
        lines.append("  fingerprint differences:")
        lines += [f"    [{d['section']}] {_field_line(d)}" for d in shown]
    if states:
        lines.append(f"  ({len(states)} RNG-state hashes differ; --json lists them)")
    return "\n".join(lines + _tensors(result["per_tensor"]))


#: what a differing hash of the fingerprint means, for the reader of the text form
HASH_MEANING = {
    "code_hash": "the code differs (git commit or uncommitted changes)",
    "config_hash": "the config differs",
    "diff_hash": "the uncommitted changes differ",
    "untracked_hash": "the untracked files differ",
    "script_hash": "the script differs",
    "packages_hash": "the installed packages differ",
    "init_params_hash": "the initial parameters differ",
}


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:12] + "…" if len(text) > 12 else text


def _field_line(d: dict[str, Any]) -> str:
    """One fingerprint difference: a hash says what differs in words (its two values cut to
    12 characters), any other field shows both values."""
    field = str(d["field"])
    if field in HASH_MEANING or field.endswith(("_hash", "_sha256")):
        meaning = HASH_MEANING.get(field, "differs")
        return f"{field}: {meaning} ({_short(d['a'])} vs {_short(d['b'])})"
    a, b = json.dumps(d["a"], default=str), json.dumps(d["b"], default=str)
    return f"{field}: {a[:60]} -> {b[:60]}"


def _difference(d: dict[str, Any]) -> list[str]:
    """The two values where the runs split, and their gap when they are numbers (a batch
    is compared by its content hash, which has no gap)."""
    if not d:
        return []
    if d.get("abs") is None:
        return [f"  a={_number(d.get('a'))}  b={_number(d.get('b'))}"]
    return [
        f"  a={_number(d.get('a'))}  b={_number(d.get('b'))}  "
        f"|a-b|={_number(d.get('abs'))}  rel={_number(d.get('rel'))}"
    ]


def _tensors(per_tensor: list[dict[str, Any]], shown: int = 10) -> list[str]:
    """Where the tensors first differ, one line per step (tensors that split at the same
    step together, the first three named); the first ``shown`` steps, then how many more."""
    from gradwatch.core.structure.timeline import names_text

    split = sorted(
        (t for t in per_tensor if t["first_step"] is not None),
        key=lambda t: (t["first_step"], t["name"]),
    )
    by_step: dict[int, list[str]] = {}
    for t in split:
        by_step.setdefault(int(t["first_step"]), []).append(str(t["name"]))
    lines = []
    for step, names in by_step.items():
        if len(names) == 1:
            lines.append(f"  tensor {names[0]}: first differs at step {step}")
        else:
            lines.append(f"  step {step}: {names_text(names)} first differ")
    if len(lines) > shown:
        rest = sum(len(n) for n in list(by_step.values())[shown:])
        lines = [*lines[:shown], f"  ... and {rest} more tensors (--json lists all)"]
    same = len(per_tensor) - len(split)
    if same and split:
        lines.append(f"  {same} tensor{'s never differ' if same != 1 else ' never differs'}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Compare and print; exit 0 when identical."""
    from gradwatch.commands.findings import UsageError
    from gradwatch.core.nonfinite import to_jsonable

    try:
        result = server_compare(args) if args.server else local_compare(args)
    except UsageError as exc:
        print(f"gradwatch compare: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError) as exc:
        where = args.server or "the local data directory"
        print(f"gradwatch compare: cannot read the runs from {where}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        public = {key: result.get(key) for key in JSON_KEYS}
        print(json.dumps(to_jsonable(public), indent=2, allow_nan=False))
    else:
        print(text(result))
    return 0 if result["verdict"] == "identical" else 1


def _tolerance(value: str) -> float:
    number = float(value)
    if not number >= 0.0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {value!r}")
    return number


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch compare``."""
    p = sub.add_parser(
        "compare",
        help="compare two runs: first divergent step, tensor and cause",
        description="Compare two runs step by step: whether they are identical, and if not "
        "the first step, metric and parameter tensor where they split, by how much, and "
        "why (environment, config, code, init, data-order, forward- or "
        "backward-nondeterminism). Reads the local data directory, or --server. Exit "
        "status: 0 identical, 1 diverged or not comparable, 2 no such run.",
    )
    p.add_argument("run_a", metavar="RUN_A", help="run id or run folder")
    p.add_argument("run_b", metavar="RUN_B", help="run id or run folder")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument(
        "--rtol",
        type=_tolerance,
        help="relative tolerance (default: exact when the fingerprints say bit-identical, "
        "else by dtype and device)",
    )
    p.add_argument(
        "--atol",
        type=_tolerance,
        help="absolute tolerance (default: 0 when the comparison is exact, else 1e-12)",
    )
    p.add_argument("--server", help="ask this server instead of reading the data directory")
    p.add_argument("--token", help="API token (default: $GRADWATCH_TOKEN)")
    p.add_argument("--data-dir", help=data_dir_help())
    p.set_defaults(func=run)
