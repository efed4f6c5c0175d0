"""``gradwatch demo``: the server and dashboard with five real demo trainings.

Starts ``gradwatch serve`` on SQLite in the data directory (the one ``gradwatch runs``,
``findings`` and ``compare`` read with no flags; the runs are in project ``demo``), creates
a log-only alert rule for that project, prints the dashboard URL, then runs
:mod:`gradwatch.demo.training` in subprocesses (two agreeing replicates, one that drifts, one with a
stale-gradient bug, one with a NaN onset), streaming to the server, and keeps serving until
Ctrl-C. ``--no-serve`` only records the runs (spooled on disk; ``gradwatch serve`` shows
them later).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gradwatch.commands import Subparsers, data_dir_help
from gradwatch.core import paths

PROJECT = "demo"  # gradwatch.demo.training.PROJECT, which imports torch

STORY = (
    ("replicate-a", "a correct run"),
    ("replicate-b", "its replicate: same config and seed, identical"),
    ("drifting", "a third replicate whose data order silently changes a third of the way in"),
    ("stale-grad", "optimizer.zero_grad() missing: gradients pile up (stale-grad)"),
    ("nan-onset", "a learning-rate bug halfway: loss and gradients go Inf, then NaN"),
)


def train_all(data_dir: Path, steps: int, server: str | None, delay: float, jobs: int) -> int:
    """Run the five trainings (``jobs`` at a time); the number that failed."""
    env = {**os.environ, "GRADWATCH_DIR": str(data_dir), "GRADWATCH_PROJECT": "demo"}

    def one(variant: str) -> int:
        cmd = [sys.executable, "-m", "gradwatch.demo.training", variant, "--steps", str(steps)]
        cmd += ["--step-delay", str(delay)] + (["--server", server] if server else [])
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        state = "done" if done.returncode == 0 else f"FAILED ({done.returncode})"
        print(f"  {variant:<12} {state}", flush=True)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
        return done.returncode

    # The first replicate trains alone: the server compares each run of a replicate group
    # with the oldest finished one that started before it, so it must be the first to start.
    first, *rest = [variant for variant, _ in STORY]
    codes = [one(first)]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        codes += list(pool.map(one, rest))
    return sum(1 for c in codes if c)


def _serve(args: argparse.Namespace, data_dir: Path) -> Any:
    import uvicorn

    from gradwatch_server.cli_actions import Settings, check_bind, create_app

    settings = Settings.from_env(db=args.db, data_dir=str(data_dir), host=args.host, port=args.port)
    check_bind(settings)
    config = uvicorn.Config(
        create_app(settings), host=args.host, port=args.port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="gradwatch-demo-server", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    if not server.started:
        raise SystemExit(
            f"gradwatch demo: could not serve on {args.host}:{args.port}; "
            "is the port taken? Try --port 8777"
        )
    return server, thread


def alert_rule(db_url: str) -> bool:
    """Create the demo project's log-only alert rule (warnings and errors, no webhook) unless
    one exists, so the Alerts page lists what the demo raises; False without the server."""
    try:
        from gradwatch_server.cli_actions import alert_rule as create_rule
    except ImportError:
        return False
    create_rule(db_url, PROJECT)
    return True


def command() -> str:
    """How to call this gradwatch from any directory: ``gradwatch`` when that name on PATH is
    this installation (after ``make demo`` it usually is not: it lives in ``.venv/bin``),
    else the full path of this installation's script, else ``python -m gradwatch``."""
    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    on_path = shutil.which("gradwatch")
    if here is not None and here.name == "gradwatch" and here.is_file():
        if on_path and Path(on_path).resolve() == here:
            return "gradwatch"
        return str(here)
    if on_path and Path(on_path).resolve().parent == Path(sys.executable).resolve().parent:
        return "gradwatch"
    return f"{sys.executable} -m gradwatch"


def next_steps(data_dir: Path, flags: str) -> str:
    """Where the demo's data is and the commands to try next, as they can be pasted in any
    directory (``flags`` selects the data directory when it is not the default one)."""
    from gradwatch_server.cli_actions import DB_FILE

    gw = command()
    return "\n".join(
        [
            f"The demo's runs are in {data_dir} (project {PROJECT}, database "
            f"{data_dir / DB_FILE}). Try:",
            f"  {gw} runs{flags}",
            "      the five runs and their findings",
            f"  {gw} findings nan-onset{flags}",
            "      one run's findings in words (a run's name, a prefix of it, or its id)",
            f"  {gw} compare replicate-a drifting{flags}",
            "      where two replicates split, and why",
        ]
    )


def run(args: argparse.Namespace) -> int:
    """Record the demo runs, and serve them unless ``--no-serve``."""
    data_dir = paths.data_dir(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    flags = f" --data-dir {data_dir}" if data_dir != paths.data_dir(None) else ""
    from gradwatch_server.cli_actions import default_db_url

    has_rule = alert_rule(args.db or default_db_url(data_dir))
    print("gradwatch demo: five short trainings on the CPU")
    for variant, what in STORY:
        print(f"  {variant:<12} {what}")
    if has_rule:
        print("  (a log-only alert rule of project demo lists its warnings on the Alerts page)")
    if args.no_serve:
        failed = train_all(data_dir, args.steps, None, 0.0, args.jobs)
        print(f"\n{next_steps(data_dir, flags)}\n  {command()} serve{flags}\n      the dashboard")
        return 1 if failed else 0
    try:
        server, thread = _serve(args, data_dir)
    except ImportError as e:
        print(
            f"gradwatch demo: the server is not installed ({e}); pip install "
            "'gradwatch[server]', or use --no-serve",
            file=sys.stderr,
        )
        return 2
    url = f"http://{args.host}:{args.port}/"
    print(f"\nDashboard: {url}  (runs appear as they train; Ctrl-C stops the server)\n")
    failed = train_all(data_dir, args.steps, url.rstrip("/"), args.step_delay, args.jobs)
    print(f"\nAll recorded ({failed} failed). Open {url} — the runs page shows each run's health;")
    print("click one for its findings in words, or Compare for the drifting replicate.")
    print(next_steps(data_dir, flags))
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        server.should_exit = True
        thread.join(10)
    return 1 if failed else 0


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch demo``."""
    p = sub.add_parser(
        "demo",
        help="serve the dashboard with five real demo trainings",
        description="Serve the dashboard with five real demo trainings: two agreeing "
        "replicates, one that drifts, one with a stale-gradient bug, one with a NaN onset. "
        "The runs go to the data directory (project demo), where `gradwatch runs`, "
        "`findings` and `compare` find them with no flags.",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--db", help="database URL (default: SQLite gradwatch.db in the data directory)")
    p.add_argument("--data-dir", help=data_dir_help())
    p.add_argument("--steps", type=int, default=300, help="steps per training (default 300)")
    p.add_argument(
        "--step-delay",
        type=float,
        default=0.01,
        metavar="SECONDS",
        help="pause after each step so training is visible live (default 0.01)",
    )
    p.add_argument("--jobs", type=int, default=2, help="trainings at a time (default 2)")
    p.add_argument("--no-serve", action="store_true", help="only record the runs, then exit")
    p.set_defaults(func=run)
