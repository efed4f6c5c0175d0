"""The server never needs torch: a real ``gradwatch serve`` in a process where ``import torch``
fails answers the comparison routes and runs the live drift passes on real recorded runs.

The process is the docker image's situation (gradwatch[server] without torch). A finder at
the front of ``sys.meta_path`` refuses every ``torch`` import and appends its name to a log,
so an attempt the server would swallow (``except ImportError``) still fails the test.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gradwatch import cli
from gradwatch.core.paths import runs_dir
from gradwatch_server.db import write_session
from gradwatch_server.drift.live import drift_pass
from gradwatch_server.groupkey import group_key
from gradwatch_server.ingest.spool_import import import_run
from gradwatch_server.models import Run
from gradwatch_server.read import groups
from tests.collector.demo_runs import record_demo
from tests.collector.drift_runs import BUGGY
from tests.server.live import sqlite_with, wait_for

NO_TORCH = textwrap.dedent(
    """
    import sys

    class NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                with open(sys.argv[1], "a") as log:
                    log.write(name + "\\n")
                raise ImportError(f"torch is not installed here (blocked: {name})")
            return None

    sys.meta_path.insert(0, NoTorch())
    """
)
"""Code run first in the server's process: ``argv[1]`` is the log of refused imports."""
SERVE = NO_TORCH + "from gradwatch.cli import main\nsys.exit(main(sys.argv[2:]))\n"
DRIFTED = {"shuffle": 17, "perturb": 7, "threads": 4, "version": 5}
"""The runs that split from ``base`` (the pinned baseline), and where (tests/collector)."""
DEMO_STEPS = 30
"""The demo's shortest useful length: its drift (step 11) and NaN onset (step 15) inside."""


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as reply:
        return json.loads(reply.read())


@contextmanager
def torchless_server(
    tmp_path: Path, db_url: str, log: Path, data_dir: Path | None = None
) -> Iterator[tuple[str, list[str]]]:
    """``gradwatch serve`` (API, dashboard, spool import and monitor) without torch, on
    ``data_dir`` (an empty one by default): the base URL and the lines it has written to
    stderr so far."""
    if data_dir is None:
        data_dir = tmp_path / "data"
        data_dir.mkdir()
    argv = ["serve", "--db", db_url, "--data-dir", str(data_dir), "--port", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(log), *argv],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        found: list[str] = []

        def started() -> bool:
            found[:] = [m for line in lines for m in re.findall(r"(http://127\.0\.0\.1:\d+)", line)]
            return bool(found) or proc.poll() is not None

        wait_for(started, "gradwatch serve to start", limit=120)
        assert found, "".join(lines)[-3000:]
        yield found[0], lines
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(10)
        proc.stderr.close()


def test_the_blocker_refuses_torch(tmp_path: Path) -> None:
    log = tmp_path / "refused.log"
    done = subprocess.run(
        [sys.executable, "-c", NO_TORCH + "import torch\n", str(log)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1 and "torch is not installed here" in done.stderr
    assert log.read_text() == "torch\n"


def test_the_server_and_the_comparison_core_import_without_torch(tmp_path: Path) -> None:
    """The quick check of the same premise (the test below is the end-to-end one)."""
    log = tmp_path / "refused.log"
    modules = "gradwatch_server.app, gradwatch_server.cli_actions, gradwatch.core.drift.verdict"
    done = subprocess.run(
        [sys.executable, "-c", f"{NO_TORCH}import {modules}\n", str(log)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not log.exists(), log.read_text()


@pytest.mark.slow
def test_a_server_without_torch_compares_groups_and_watches_drift(
    tmp_path: Path, drift_runs: tuple[Path, dict[str, str]]
) -> None:
    root, ids = drift_runs
    db_url, engine = sqlite_with(tmp_path / "gradwatch.db", runs_dir(root) / ids["base"])
    assert drift_pass(engine) == []  # base is known (its seed) before its replicates arrive
    with write_session(engine) as session:
        base = session.get(Run, ids["base"])
        assert base is not None
        key = str(group_key(base.config_hash, base.code_hash))
        groups.pin(session, key=key, run=base)  # the reference of the live comparison
    for name in ids.keys() - {"base"}:
        import_run(engine, runs_dir(root) / ids[name])
    engine.dispose()
    log = tmp_path / "refused.log"
    with torchless_server(tmp_path, db_url, log) as (url, stderr):
        api = f"{url}/api/v1"

        def compare(b: str) -> dict[str, Any]:
            out: dict[str, Any] = get(f"{api}/compare?a={ids['base']}&b={ids[b]}")
            return out

        same = compare("same")
        assert (same["verdict"], same["exact"], same["steps_compared"]) == ("identical", True, 30)
        for name, step in DRIFTED.items():
            res = compare(name)
            assert (res["verdict"], res["step"]) == ("diverged", step), name
        assert (compare("perturb")["cause"], compare("perturb")["param"]) == (
            "backward-nondeterminism",
            "2.weight",
        )
        assert (compare("shuffle")["cause"], compare("shuffle")["metric"]) == (
            "data-order",
            "batch",
        )
        init = compare("init")
        assert (init["verdict"], init["cause"], init["step"], init["param"]) == (
            "diverged",
            "init",
            1,
            "0.weight",
        )
        assert (compare("config")["cause"], compare("config")["metric"]) == (
            "config",
            "update_norm",
        )

        # Live drift and seed envelopes: the monitor's passes, in the torch-free process.
        def watched() -> bool:
            group = get(f"{api}/groups/{key}")
            return sorted(group["drifted"]) == sorted(ids[n] for n in DRIFTED) and group[
                "outside_envelope"
            ] == [ids[BUGGY]]

        wait_for(watched, "the live drift and envelope passes", limit=180)
        group = get(f"{api}/groups/{key}")
        assert group["baseline"] == ids["base"] and group["seeds"] == [0, 1, 2, 3, 4]
        for name, step in DRIFTED.items():
            (found,) = get(f"{api}/runs/{ids[name]}/findings?check=repro-drift")["data"]
            assert (found["step"], found["source"]) == (step, "server")
        assert get(f"{api}/runs/{ids['same']}/findings?check=repro-drift")["data"] == []
        assert get(f"{api}/groups")["count"] == 2  # the changed-lr run is a group of its own
        envelope = get(f"{api}/groups/{key}/envelope")
        assert [r["id"] for r in envelope["runs"] if r["outside"]] == [ids[BUGGY]]
        assert [r["seed"] for r in envelope["runs"]] == [0, 1, 2, 3, 4]  # one run per seed
        assert len(envelope["steps"]) == len(envelope["median"]) == 30
        assert all(
            lo <= m <= hi
            for lo, m, hi in zip(*(envelope[k] for k in ("low", "median", "high")), strict=True)
        )
    assert not log.exists(), f"the server tried to import: {log.read_text()}"
    text = "".join(stderr)
    assert "torch" not in text and "Traceback" not in text, text[-3000:]


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding the demo's five runs, recorded once for this module."""
    return record_demo(tmp_path_factory.mktemp("demo"), DEMO_STEPS, jobs=2)


def local_compare(root: Path, a: str, b: str, capsys: pytest.CaptureFixture[str]) -> Any:
    """``gradwatch compare A B --json`` on the data directory, in this process (with torch),
    as printed: non-finite floats tagged as the API sends them, so NaN equals NaN."""
    capsys.readouterr()
    cli.main(["compare", a, b, "--json", "--data-dir", str(root)])
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_a_server_without_torch_compares_the_demo_runs_as_the_collector_does(
    tmp_path: Path, demo_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every ordered pair of the demo's runs: ``GET /api/v1/compare`` of a torch-free
    server that imported the spools itself says what ``gradwatch compare --json`` says on
    the same spools, to the last field of the CLI's JSON (both as sent)."""
    data = tmp_path / "data"
    shutil.copytree(demo_root, data, ignore=shutil.ignore_patterns("gradwatch.db*"))
    db_url, engine = sqlite_with(tmp_path / "gradwatch.db")
    engine.dispose()
    ids = sorted(p.name for p in runs_dir(demo_root).iterdir())
    assert len(ids) == 5
    log = tmp_path / "refused.log"
    with torchless_server(tmp_path, db_url, log, data) as (url, stderr):
        api = f"{url}/api/v1"

        def imported() -> bool:
            runs = get(f"{api}/runs?project=demo")["data"]
            return len(runs) == len(ids) and all(r["ended"] is not None for r in runs)

        wait_for(imported, "the spool import of the demo runs", limit=120)
        names = {r["id"]: r["name"] for r in get(f"{api}/runs?project=demo")["data"]}
        verdicts = {}
        for a, b in itertools.permutations(ids, 2):
            local = local_compare(demo_root, a, b, capsys)
            served = get(f"{api}/compare?a={a}&b={b}")
            assert served.keys() - local.keys() <= {"problems"}  # the server's data checks
            assert {k: served[k] for k in local} == local, (names[a], names[b])
            verdicts[names[a], names[b]] = local
    assert verdicts["replicate-a", "replicate-b"]["verdict"] == "identical"
    drift = verdicts["replicate-a", "drifting"]
    assert (drift["verdict"], drift["cause"], drift["step"]) == ("diverged", "data-order", 11)
    assert {verdicts["replicate-a", bug]["cause"] for bug in ("stale-grad", "nan-onset")} == {
        "config"
    }
    assert not log.exists(), f"the server tried to import: {log.read_text()}"
    text = "".join(stderr)
    assert "torch" not in text and "Traceback" not in text, text[-3000:]
