"""The server's background work for drift and alerts, on one daemon thread per process.

Every ``interval`` seconds: the live comparison of runs with new steps
(:func:`gradwatch_server.drift.live.drift_pass`), the seed envelopes of the groups whose runs
received steps (:func:`gradwatch_server.drift.live.envelope_pass`), and the due webhook
deliveries (:func:`gradwatch_server.alerts.webhooks.deliver_pass`). A failing pass is logged and
the loop goes on. Several processes may run it on one database: findings and alerts are
stored once, deliveries are claimed before they are sent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from gradwatch_server.alerts.webhooks import WebhookPolicy, deliver_pass
from gradwatch_server.drift.live import drift_pass, envelope_pass
from gradwatch_server.groupkey import group_key
from gradwatch_server.models import Run

log = logging.getLogger("gradwatch_server")


class Monitor:
    """Runs :meth:`tick` on a daemon thread until :meth:`stop`."""

    def __init__(self, engine: Engine, policy: WebhookPolicy, interval: float) -> None:
        self.engine = engine
        self.policy = policy
        self.interval = interval
        self._steps: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gradwatch-monitor", daemon=True)

    def start(self) -> None:
        """Start the loop."""
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current pass."""
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def tick(self) -> None:
        """One round of every pass; never raises."""
        passes: list[tuple[str, Callable[[], Any]]] = [
            ("drift", lambda: drift_pass(self.engine)),
            ("envelope", self._envelopes),
            ("webhooks", lambda: deliver_pass(self.engine, self.policy)),
        ]
        for name, work in passes:
            try:
                work()
            except Exception as e:
                log.warning("monitor: %s pass: %s: %s", name, type(e).__name__, e)

    def _envelopes(self) -> None:
        """Envelopes of the groups with a run whose step count changed since the last look."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(
                    col(Run.id),
                    col(Run.project_id),
                    col(Run.config_hash),
                    col(Run.code_hash),
                    col(Run.steps),
                ).where(col(Run.config_hash).is_not(None))
            ).all()
        dirty = set()
        for run_id, project_id, config, code, steps in rows:
            if self._steps.get(run_id) != steps:
                self._steps[run_id] = int(steps)
                dirty.add((int(project_id), str(group_key(config, code))))
        if dirty:
            envelope_pass(self.engine, dirty)
