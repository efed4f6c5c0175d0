"""Real processes for the fault suite, and the ledger oracle.

- ``ServerProcess``: ``python -m gradwatch serve`` on a fixed loopback port and database,
  which a test may SIGKILL and start again (same port, same database).
- ``Trainer``: ``scripts/train_loop.py`` as a child process (real torch, real gradwatch).
- ``account(run_dir, db_url, base_url)``: the exact accounting. The ledger is what the
  collector produced: its CRC-checked spool, every frame numbered by ``seq``. The server
  must hold exactly those seqs (none missing, none extra) and, through the API, every
  statistic of every step exactly once with the same float bits.
"""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import text

from gradwatch.core.local_reader import load_run
from gradwatch.core.spool import read_spool
from gradwatch_server.db import make_engine
from tests.server.live import wait_for
from tests.server.test_commands import free_port

SCRIPT = Path(__file__).parent / "scripts" / "train_loop.py"
STATS = ("grad_norm", "param_norm", "update_norm", "nonfinite_grad")


def get_json(url: str, timeout: float = 10.0) -> Any:
    """GET a JSON reply, or None when the server cannot be reached or answers an error."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return json.loads(reply.read())
    except OSError:
        return None


def status_of(url: str) -> int:
    """The HTTP status a GET of ``url`` is answered with."""
    try:
        with urllib.request.urlopen(url, timeout=60) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _series(url: str) -> Any:
    """The series reply; fails saying whether the server answered an error (its status
    and message) or did not answer within 60 s."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=60) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(
            f"the series endpoint answered {e.code} after {time.monotonic() - t0:.1f} s: "
            f"{e.read()[:500]!r}"
        ) from e
    except OSError as e:
        raise AssertionError(
            f"the series endpoint did not answer ({e}) after {time.monotonic() - t0:.1f} s"
        ) from e


class ServerProcess:
    """A ``gradwatch serve`` child that can be killed and restarted on the same port."""

    def __init__(self, db_url: str, data_dir: Path, port: int | None = None) -> None:
        self.db_url = db_url
        self.data_dir = data_dir  # the server's own: never the collectors' folder
        self.port = port or free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0
        self.kills = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> None:
        cmd = [sys.executable, "-m", "gradwatch", "serve", "--port", str(self.port)]
        env = {**os.environ, "GRADWATCH_DIR": str(self.data_dir), "GRADWATCH_DB": self.db_url}
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.starts += 1
        if wait:
            self.wait_healthy()

    def wait_healthy(self, limit: float = 120.0) -> None:
        proc = self.proc
        assert proc is not None
        try:
            wait_for(
                lambda: get_json(f"{self.url}/api/v1/health", 5) or proc.poll() is not None,
                "gradwatch serve to answer",
                limit,
            )
        except AssertionError as e:
            proc.kill()
            raise AssertionError(f"{e}; its stderr: {proc.communicate()[1]}") from e
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown, open transactions and sockets cut where they are."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=30)
        self.kills += 1
        self.proc = None

    def stop(self) -> str:
        """Terminate normally; returns stderr."""
        if self.proc is None:
            return ""
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        self.proc = None
        return err


class Trainer:
    """``train_loop.py`` in a child process; ``lines`` collects what it printed."""

    def __init__(self, data_dir: Path, steps: int, pause: float, *extra: str) -> None:
        cmd = [sys.executable, str(SCRIPT), str(data_dir), str(steps), str(pause), *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._run_dir: Path | None = None
        self.watch_ms = self.watch_cpu_ms = 0.0

    @property
    def run_dir(self) -> Path:
        """The run's folder (waits until the process has called ``watch()``)."""
        if self._run_dir is None:
            self._run_dir = Path(self._expect("run "))
            self.watch_ms, self.watch_cpu_ms = map(float, self._expect("watch_ms ").split())
        return self._run_dir

    @classmethod
    def many(
        cls, n: int, data_dir: Path, pause: float, *extra: str, quiet: bool = True
    ) -> list[Trainer]:
        """``n`` trainings started together; returns once each is past ``watch()``.

        ``quiet``: no step lines, so a test that does not read them never blocks a trainer
        on a full pipe.
        """
        flags = ("--quiet",) if quiet else ()
        trainers = [cls(data_dir, 10_000_000, pause, *flags, *extra) for _ in range(n)]
        for trainer in trainers:
            assert trainer.run_dir.is_dir()
        return trainers

    def _expect(self, prefix: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith(prefix), (line, self.proc.stderr.read() if self.proc.stderr else "")
        return line[len(prefix) :].strip()

    def finish(self, timeout: float = 120.0) -> tuple[list[str], str, dict[str, Any]]:
        """Wait for the exit; (stdout lines, stderr, the final I/O stats)."""
        assert self.run_dir.is_dir()
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        lines = out.splitlines()
        return lines, err, json.loads(lines[-1].removeprefix("stats "))


@dataclass
class Accounting:
    """What one run's ledger held and what the server holds."""

    run: str
    frames: int
    values: int
    steps: int


def bits(x: float) -> bytes:
    """A float's identity for comparison: NaN by class, everything else bit for bit."""
    return b"nan" if math.isnan(x) else struct.pack("<d", x)


def account(run_dir: Path, db_url: str, base_url: str) -> Accounting:
    """Assert the server holds exactly the run's spooled frames and values; return counts."""
    ledger = read_spool(run_dir)
    assert ledger.corrupt_frames == 0
    want = [frame.seq for frame in ledger.frames]
    assert want == list(range(1, len(want) + 1)), "the ledger itself has a gap"
    engine = make_engine(db_url)
    with engine.connect() as conn:
        got = conn.execute(
            text("SELECT seq FROM ingested_frames WHERE run_id = :r ORDER BY seq"),
            {"r": run_dir.name},
        ).scalars()
        have = [int(s) for s in got]
    engine.dispose()
    missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    assert not missing and not extra, f"{run_dir.name}: missing seqs {missing}, extra {extra}"
    assert len(have) == len(set(have))
    if not want:  # killed before its writer's first flush: nothing spooled, nothing to send
        assert status_of(f"{base_url}/api/v1/runs/{run_dir.name}") == 404, run_dir.name
        return Accounting(run_dir.name, 0, 0, 0)
    local = load_run(run_dir)
    rows = local.steps.get(0, [])
    steps = [row.step for row in rows]
    assert steps == sorted(set(steps)), "the ledger repeats a step"
    query = urllib.parse.urlencode(
        [("tensor", t) for t in local.tensor_names]
        + [("stat", s) for s in STATS]
        + [("points", str(max(len(rows), 2)))]
    )
    reply = _series(f"{base_url}/api/v1/runs/{run_dir.name}/series?{query}")
    values = 0
    for series in reply["data"]:
        i, s = local.tensor_names.index(series["name"]), STATS.index(series["stat"])
        assert not series["downsampled"] and series["total"] == len(rows)
        assert series["steps"] == steps, f"{series['name']} {series['stat']}: steps differ"
        expected = [bits(row.stats[i][s]) for row in rows]
        served = [bits(float(v)) for v in series["values"]]
        assert served == expected, f"{series['name']} {series['stat']}: values differ"
        values += len(served)
    assert values == len(rows) * len(local.tensor_names) * len(STATS)
    return Accounting(run_dir.name, len(want), values, len(rows))


def wait_until_delivered(run_dirs: list[Path], db_url: str, limit: float = 60.0) -> None:
    """Poll the database until it holds every spooled seq of every run."""

    def done() -> bool:
        engine = make_engine(db_url)
        try:
            with engine.connect() as conn:
                for run_dir in run_dirs:
                    n = conn.execute(
                        text("SELECT count(*) FROM ingested_frames WHERE run_id = :r"),
                        {"r": run_dir.name},
                    ).scalar_one()
                    if int(n) < len(read_spool(run_dir).frames):
                        return False
        finally:
            engine.dispose()
        return True

    deadline = time.monotonic() + limit
    while not done():
        assert time.monotonic() < deadline, "not everything arrived in time"
        time.sleep(0.5)
