"""Real training runs for the drift tests: each one a separate Python process.

``train_all(data_dir, variants)`` runs ``scripts/train_replica.py`` once per variant, a few
at a time, and returns the run id of each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SCRIPT = Path(__file__).parent / "scripts" / "train_replica.py"

VARIANTS: dict[str, list[str]] = {
    "base": [],
    "same": [],
    "shuffle": ["--shuffle-seed", "7", "--shuffle-from-epoch", "2"],
    "init": ["--init-seed", "1"],
    "perturb": ["--perturb-step", "7", "--perturb-param", "2.weight"],
    "threads": ["--threads", "2", "--perturb-step", "4", "--perturb-param", "0.bias"],
    "version": ["--torch-version", "2.99.0", "--perturb-step", "5", "--perturb-param", "0.bias"],
    "config": ["--lr", "0.06"],
    "seed2": ["--init-seed", "2", "--shuffle-seed", "2"],
    "seed3": ["--init-seed", "3", "--shuffle-seed", "3"],
    "seed4-bug": ["--init-seed", "4", "--shuffle-seed", "4", "--bug"],
}
"""Name -> flags. ``threads`` and ``version`` change the environment and also split at a
known step: on this CPU one and two threads give the same bits for this model, so the
split a new thread count or library would cause is emulated by a perturbed gradient."""
SWEEP = ("base", "init", "seed2", "seed3", "seed4-bug")
"""Five seeds of one config (one per seed), one of them with a silent bug."""
BUGGY = "seed4-bug"


def train(data_dir: Path, args: list[str], extra_env: dict[str, str] | None = None) -> str:
    """One run in a fresh process; its run id."""
    env = {**os.environ, "GRADWATCH_CHECKS": "all=record", **(extra_env or {})}
    env.pop("GRADWATCH_SERVER", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(data_dir), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split("run ", 1)[1].split()[0]


def train_all(
    data_dir: Path, variants: dict[str, list[str]], extra_env: dict[str, str] | None = None
) -> dict[str, str]:
    """Every variant trained (3 processes at a time); name -> run id."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {
            name: pool.submit(train, data_dir, args, extra_env) for name, args in variants.items()
        }
        return {name: f.result() for name, f in futures.items()}


CACHE_ENV = "GRADWATCH_TEST_DRIFT_CACHE"


def cached_or_trained(fresh: Path) -> tuple[Path, dict[str, str]]:
    """Train every variant into ``fresh``; or, for quicker local iterations only, reuse the
    runs kept in ``$GRADWATCH_TEST_DRIFT_CACHE`` (trained there on first use)."""
    cache = os.environ.get(CACHE_ENV)
    root = Path(cache) if cache else fresh
    index = root / "variants.json"
    if cache and index.is_file():
        ids: dict[str, str] = json.loads(index.read_text())
        if set(ids) == set(VARIANTS):
            return root, ids
    ids = train_all(root, VARIANTS)
    if cache:
        index.write_text(json.dumps(ids))
    return root, ids
