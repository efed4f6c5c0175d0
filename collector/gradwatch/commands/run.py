"""``gradwatch run -- python train.py ARGS``: watch an unmodified script.

The command runs as a child process with the script's stdin, stdout and stderr; its exit
status is the child's. The child (and any Python process it starts, e.g. under
``torchrun``) gets a ``PYTHONPATH`` entry with a ``sitecustomize.py`` that loads
:mod:`gradwatch.session.autowatch` once torch is imported, and the options as environment
variables. gradwatch's own lines go to stderr, prefixed ``gradwatch``. Before the start,
the script is linted (``gradwatch lint``); its findings are stored with every run it
starts (``--no-lint`` skips this).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from gradwatch.commands import Subparsers, data_dir_help
from gradwatch.core import paths
from gradwatch.core.errors import ConfigError

PREFIX = "gradwatch run:"


def _say(message: str) -> None:
    print(f"{PREFIX} {message}", file=sys.stderr, flush=True)


def child_env(
    args: argparse.Namespace, bootstrap: Path, manifest: Path, data_dir: Path
) -> dict[str, str]:
    """The environment of the watched command."""
    from gradwatch.core.jobs import ENV_JOB
    from gradwatch.session import options  # loads torch: only when a run is started
    from gradwatch.session.autowatch import ENV_MANIFEST, ENV_ON

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(bootstrap), env.get("PYTHONPATH")]))
    env[ENV_ON] = "1"
    env[ENV_MANIFEST] = str(manifest)
    env["GRADWATCH_DIR"] = str(data_dir)
    env[ENV_JOB] = f"job-{paths.new_run_id()}"  # every run this invocation starts shares it
    if args.project is not None:
        env["GRADWATCH_PROJECT"] = args.project
    if args.name is not None:
        env["GRADWATCH_NAME"] = args.name
    if args.server is not None:
        env["GRADWATCH_SERVER"] = args.server
    if args.accumulation_steps is not None:
        env["GRADWATCH_ACCUMULATION_STEPS"] = str(args.accumulation_steps)
    if args.check:  # later entries win, so the flags override the environment
        env[options.CHECKS_ENV] = ",".join(filter(None, [env.get(options.CHECKS_ENV), *args.check]))
    return env


def _validate(args: argparse.Namespace) -> None:
    """Every flag checked here, before the script starts (ConfigError says what to fix)."""
    from gradwatch.session import options

    options.parse_checks(",".join(args.check), source="--check")
    options.resolve(
        project=args.project,
        name=args.name,
        server=args.server,
        accumulation_steps=args.accumulation_steps,
    )


def spawn(command: Sequence[str], env: dict[str, str]) -> int:
    """Run ``command`` to the end; its exit status (128 + N when killed by signal N).

    Ctrl-C reaches the child through the terminal's process group, so this process ignores
    it while waiting; a SIGTERM sent to this process is passed on to the child."""
    try:
        child = subprocess.Popen(list(command), env=env)
    except OSError as exc:
        _say(f"cannot start {command[0]!r}: {exc.strerror or exc}")
        return 127 if isinstance(exc, FileNotFoundError) else 126

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    previous = (
        signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.signal(signal.SIGTERM, forward),
    )
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
    return 128 - code if code < 0 else code


def started_runs(manifest: Path) -> list[dict[str, str]]:
    """The runs the watched processes reported (one JSON line each)."""
    if not manifest.is_file():
        return []
    out = []
    for text in manifest.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(text))
        except ValueError:  # a torn line from a killed process
            continue
    return out


def report(runs: list[dict[str, str]], data_dir: Path, explicit_dir: bool) -> None:
    """One line per run: its findings by severity and the command that lists them."""
    from gradwatch.commands.findings import local_findings, runtime_only, summary
    from gradwatch.core.confirm import mark
    from gradwatch.core.incidents import annotate, views

    if not runs:
        _say(
            "no model was watched: the command built no torch optimizer, or ran no forward "
            "pass after building one"
        )
        return
    where = f" --data-dir {data_dir}" if explicit_dir else ""
    for entry in runs:
        try:
            found = annotate(mark(local_findings(Path(entry["dir"]))))
        except (OSError, ValueError) as exc:
            _say(f"run {entry['run']}: cannot read its findings ({exc})")
            continue
        _say(f"{summary(entry['run'], found)}; details: gradwatch findings {entry['run']}{where}")
        # an incident of several findings, one sentence (a single finding's line was printed)
        for view in views(runtime_only(found)):
            if view.severity != "info" and view.consequences:
                _say(f"  [{view.severity}] {view.sentence()}")


def script_of(command: Sequence[str]) -> Path | None:
    """The Python script a command runs (``python train.py``, ``torchrun ... train.py``,
    ``./train.py``), or None (``python -m package``, not a Python command)."""
    for arg in command[1:]:
        if arg == "-m":
            return None
        if arg.endswith(".py") and Path(arg).is_file():
            return Path(arg)
    first = Path(command[0]) if command else None
    return first if first is not None and first.suffix == ".py" and first.is_file() else None


def lint_script(command: Sequence[str], folder: Path) -> dict[str, str]:
    """Lint the command's script; its findings go to a file the watched process attaches
    to every run it starts (the environment entry that names it is returned). A script
    that cannot be linted is run all the same."""
    from gradwatch.lint import lint_paths
    from gradwatch.lint.report import counts
    from gradwatch.session.autowatch import ENV_LINT

    script = script_of(command)
    if script is None:
        return {}
    try:
        result = lint_paths([script])
    except Exception as exc:  # linting never stops the script from running
        _say(f"lint skipped: {type(exc).__name__}: {exc}")
        return {}
    if result.errors:
        _say(f"lint skipped: {result.errors[0]}")
        return {}
    shown = result.shown()
    if shown:
        _say(
            f"lint: {counts(shown)} in {script}; stored with the run "
            f"(`gradwatch lint {script}` explains them)"
        )
    path = folder / "lint.json"
    path.write_text(json.dumps([f.to_meta() for f in shown]), encoding="utf-8")
    return {ENV_LINT: str(path)}


def run(args: argparse.Namespace) -> int:
    """Run the command watched; its exit status is the command's."""
    from gradwatch.session.autowatch import SITECUSTOMIZE

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        _say("no command given; usage: gradwatch run [options] -- python train.py ARGS")
        return 2
    try:
        _validate(args)
    except ConfigError as exc:
        _say(str(exc))
        return 2
    data_dir = paths.data_dir(args.data_dir).absolute()
    with tempfile.TemporaryDirectory(prefix="gradwatch-run-") as tmp:
        bootstrap = Path(tmp)
        (bootstrap / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
        manifest = bootstrap / "runs.jsonl"
        env = child_env(args, bootstrap, manifest, data_dir)
        if not args.no_lint:
            env.update(lint_script(command, bootstrap))
        _say(f"watching `{shlex.join(command)}`; runs are stored in {paths.runs_dir(data_dir)}")
        code = spawn(command, env)
        runs = started_runs(manifest)
    report(runs, data_dir, explicit_dir=args.data_dir is not None)
    return code


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch run``."""
    p = sub.add_parser(
        "run",
        help="run an unmodified training script with gradwatch attached",
        usage="gradwatch run [options] -- python SCRIPT [ARGS...]",
        description="Run a command (usually `python train.py ...`) with gradwatch attached "
        "to every model and optimizer it builds. The script's output and exit status are "
        "kept; gradwatch prints the run id(s) and a findings summary to stderr.",
    )
    p.add_argument("--project", help="project name (default: $GRADWATCH_PROJECT or 'default')")
    p.add_argument("--name", help="run name (default: the run id)")
    p.add_argument(
        "--check",
        action="append",
        default=[],
        metavar="ID=POLICY",
        help="policy of one check (off|record|warn|raise|skip|checkpoint), e.g. --check "
        "stale-grad=raise; "
        "repeatable; 'all=POLICY' sets every check",
    )
    p.add_argument("--server", help="also stream to this server (default: $GRADWATCH_SERVER)")
    p.add_argument(
        "--accumulation-steps",
        type=int,
        metavar="K",
        help="declared gradient accumulation (backward passes per optimizer step)",
    )
    p.add_argument("--data-dir", help=data_dir_help())
    p.add_argument(
        "--no-lint",
        action="store_true",
        help="do not lint the script (by default its `gradwatch lint` findings are stored "
        "with the run)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after `--`")
    p.set_defaults(func=run)
