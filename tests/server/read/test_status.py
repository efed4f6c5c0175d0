"""Run status from END records, heartbeats and the process table."""

from __future__ import annotations

import os
import subprocess
import sys

from gradwatch_server.models import Run
from gradwatch_server.read.status import StatusPolicy, pid_alive, run_status

POLICY = StatusPolicy(stalled_after=120.0, crashed_after=3600.0, host="here")
NOW = 1_000_000.0


def run(**kw: object) -> Run:
    return Run(id="r", project_id=1, received_at=NOW, **kw)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_end_record_decides() -> None:
    assert run_status(run(end_status="finished", last_t=0.0), POLICY, NOW) == "finished"
    assert run_status(run(end_status="failed"), POLICY, NOW) == "failed"


def test_recent_heartbeat_is_running_then_stalled_then_crashed() -> None:
    remote = {"host": "there", "last_t": NOW - 10}
    assert run_status(run(**remote), POLICY, NOW) == "running"
    assert run_status(run(**remote), POLICY, NOW + 200) == "stalled"
    assert run_status(run(**remote), POLICY, NOW + 4000) == "crashed"


def test_a_local_run_whose_process_is_gone_is_crashed() -> None:
    local = {"host": "here", "last_t": NOW - 60}
    assert run_status(run(pid=dead_pid(), **local), POLICY, NOW) == "crashed"
    assert run_status(run(pid=os.getpid(), **local), POLICY, NOW) == "running"
    assert run_status(run(pid=os.getpid(), **local), POLICY, NOW + 200) == "stalled"


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())
    assert not pid_alive(0)
