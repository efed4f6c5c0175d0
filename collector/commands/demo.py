"""``gradwatch demo``: the server and dashboard with five real demo trainings.

Starts ``gradwatch serve`` on SQLite in the demo data directory, prints the dashboard URL,
then runs :mod:`gradwatch.demo` in subprocesses (two agreeing replicates, one that
drifts, one with a stale-gradient bug, one with a NaN onset), streaming to the server,
and keeps serving until Ctrl-C. ``--no-serve`` only records the runs (spooled on disk;
``gradwatch serve --data-dir DIR`` shows them later).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gradwatch import paths
from gradwatch.commands import Subparsers

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
        cmd = [sys.executable, "-m", "gradwatch.demo", variant, "--steps", str(steps)]
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

    from gradwatch.server.app import create_app
    from gradwatch.server.config import Settings
    from gradwatch.server.main import check_bind

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


def run(args: argparse.Namespace) -> int:
    """Record the demo runs, and serve them unless ``--no-serve``."""
    data_dir = Path(args.data_dir) if args.data_dir else paths.data_dir(None) / "demo"
    data_dir.mkdir(parents=True, exist_ok=True)
    print("gradwatch demo: five short trainings on the CPU")
    for variant, what in STORY:
        print(f"  {variant:<12} {what}")
    if args.no_serve:
        failed = train_all(data_dir, args.steps, None, 0.0, args.jobs)
        print(f"Recorded under {data_dir}; see them with `gradwatch serve --data-dir {data_dir}`.")
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
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--db", help="database URL (default: SQLite in the demo data directory)")
    p.add_argument("--data-dir", help="where the demo runs go (default: DATA_DIR/demo)")
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
