"""A run's live status, derived when asked (never stored, so it is never stale).

- ``finished`` / ``failed`` (or another status the END record gave): the run closed.
- ``crashed``: no END, and either the process is gone (same host: its pid no longer
  exists) with no activity for ``CRASH_GRACE`` seconds, or nothing arrived for
  ``crashed_after`` seconds.
- ``stalled``: no END and no heartbeat or data for ``stalled_after`` seconds.
- ``running``: otherwise.

Activity is the newest collector timestamp (heartbeat, start, end) on the same host, and
the later of that and the server's receive time for runs from other hosts (whose clocks
may differ from ours).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from gradwatch_server.models import Run

STATUSES = ("running", "finished", "failed", "crashed", "stalled")
CRASH_GRACE = 15.0  # a collector writes a heartbeat every 5 s


@dataclass(frozen=True)
class StatusPolicy:
    """Thresholds in seconds, and this machine's host name."""

    stalled_after: float = 120.0
    crashed_after: float = 3600.0
    host: str = socket.gethostname()


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (on this machine)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def run_status(run: Run, policy: StatusPolicy, now: float) -> str:
    """The status of ``run`` at time ``now`` (see the module docstring)."""
    if run.end_status:
        return run.end_status
    local = run.host is not None and run.host == policy.host
    activity = run.last_t if local else max(run.last_t or 0.0, run.received_at)
    idle = now - (activity if activity is not None else run.received_at)
    if local and run.pid is not None and idle > CRASH_GRACE and not pid_alive(run.pid):
        return "crashed"
    if idle > policy.crashed_after:
        return "crashed"
    if idle > policy.stalled_after:
        return "stalled"
    return "running"
