"""Rank 0's comparer: waits for every rank's summary of a step, compares, reports.

It runs on a daemon thread of its own with its own connection to the store, so neither
the training thread nor the I/O thread ever waits for another rank. It learns what to
expect from rank 0's own publications (the ranks run the same loop), polls the store
until every rank has published the same item, and gives up on the exchange — with one
line on stderr — when a rank stays silent for ``WAIT_SECONDS`` (not watched, crashed).
Findings go through the run's sink like every other check's. A ``raise`` policy raises
at rank 0's next optimizer step (the other ranks then stop at their next collective);
``skip`` cannot act on one rank alone and behaves as ``warn``.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import TYPE_CHECKING, Any

from gradwatch.checks import ddp as checks
from gradwatch.checks.findings import Finding
from gradwatch.core import checkids
from gradwatch.core.errors import IntegrityError
from gradwatch.transport.record_builder import notice_record

if TYPE_CHECKING:
    from collections.abc import Callable

    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch

WAIT_SECONDS = 120.0
POLL_SECONDS = 0.05


class Comparer(threading.Thread):
    """Compares the ranks' summaries of one run (rank 0 only)."""

    def __init__(
        self,
        owner: HookContext[OptimizerWatch],
        store: Any,
        world_size: int,
        key: Callable[..., str],
        names: list[str],
    ) -> None:
        """``store``: the job's torch.distributed store (cloned here); ``key``: the store key
        of one item of this run's exchange; ``names``: the compared parameters."""
        super().__init__(name="gradwatch-ddp", daemon=True)
        self.owner = owner
        self.key = key
        self.names = names
        self.store: Any = store.clone()
        self.world = world_size
        self.items: queue.SimpleQueue[tuple[str, object] | None] = queue.SimpleQueue()
        self.deadline: float | None = None  # set by finish(): the last moment to wait
        self.stopped = False
        self.comparable = True  # parameter layouts agree
        self.nonfinite_done = False
        self.error: IntegrityError | None = None
        self._raise_hook = self.owner.watches[0].optimizer.register_step_pre_hook(
            self.owner.guard(self._raise_pending, "cross-rank policy")
        )

    def expect(self, kind: str, index: object) -> None:
        """Rank 0 published ``kind/index``: compare it once every rank has."""
        self.items.put((kind, index))

    def finish(self, timeout: float) -> None:
        """Compare what arrives within ``timeout`` seconds, then stop."""
        self.deadline = time.monotonic() + timeout
        self.items.put(None)
        self.join(timeout + 1.0)
        self._raise_hook.remove()

    def _raise_pending(self, *args: Any) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    # -- the thread ------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            item = self.items.get()
            if item is None:
                return
            if self.stopped:
                continue
            try:
                values = self._gather(*item)
                if values is not None:
                    self._compare(item[0], item[1], values)
            except Exception as exc:  # never let the comparer die loudly
                self.stopped = True
                self.owner.internal_errors += 1
                self.owner.report_once(
                    "ddp compare", f"cross-rank checks stopped (internal error: {exc})"
                )

    def _gather(self, kind: str, index: object) -> list[dict[str, Any]] | None:
        keys = [self.key(kind, index, r) for r in range(self.world)]
        limit = time.monotonic() + WAIT_SECONDS
        while not self.store.check(keys):
            now = time.monotonic()
            if now > limit or (self.deadline is not None and now > self.deadline):
                self._silent(kind, index, keys)
                return None
            time.sleep(POLL_SECONDS)
        values = [json.loads(v) for v in self.store.multi_get(keys)]
        for key in keys:
            self.store.delete_key(key)
        return values

    def _silent(self, kind: str, index: object, keys: list[str]) -> None:
        missing = [r for r, key in enumerate(keys) if not self.store.check([key])]
        self.stopped = True
        what = "the end of the run" if kind == "end" else f"{kind}/{index}"
        self.owner.report_once(
            "ddp silent",
            f"cross-rank checks stopped: rank(s) {missing} did not publish {what} in time "
            "(watch() must run on every rank; a rank may have crashed or be far behind)",
        )

    def _compare(self, kind: str, index: object, values: list[dict[str, Any]]) -> None:
        if kind == "fp":
            self._fingerprints(values)
        elif kind == "c" and self.comparable:
            self._report(checks.param_desync(int(str(index)), self.names, values))
        elif kind == "w":
            self._report(
                checks.rank_spread(int(str(index)), values), clear=checkids.DDP_RANK_SPREAD
            )
            self._nonfinite(int(values[0]["last_step"]))
        elif kind == "end":
            steps = {int(v["step"]) for v in values}
            if self.comparable and len(steps) == 1:
                self._report(checks.param_desync(steps.pop(), self.names, values))
            self._nonfinite(max(int(v["step"]) for v in values))

    def _fingerprints(self, values: list[dict[str, Any]]) -> None:
        if checks.layouts_differ(values):
            self.comparable = False
            self.owner.report_once(
                "ddp layout",
                "ranks hold different parameter layouts (sharded or tensor-parallel model): "
                "ddp-param-desync is off for this run",
            )
        differ = checks.fingerprint_differences(values)
        if differ:
            self.owner.io.submit(notice_record({"notice": "ddp-fingerprint", "differ": differ}))
            fields = ", ".join(sorted(differ))
            self.owner.report_once(
                "ddp fingerprint", f"the ranks' fingerprints differ in {fields}: {differ}"
            )

    def _nonfinite(self, upto: int) -> None:
        if self.nonfinite_done or not self.owner.sink.enabled(checkids.DDP_NONFINITE_RANK):
            return
        if int(self.store.add(self.key("nf_count"), 0)) == 0:
            return
        keys = [self.key("nf", 0, r) for r in range(self.world)]
        reports = [json.loads(self.store.get(k)) for k in keys if self.store.check([k])]
        found = checks.first_nonfinite(upto, reports)
        if found is not None:
            self.nonfinite_done = True
            self._report(found)

    def _report(self, found: Finding | None, clear: str | None = None) -> None:
        sink = self.owner.sink
        if found is None:
            if clear is not None:
                sink.clear(clear)
            return
        if not sink.enabled(found.check):
            return
        try:
            sink.report(found)
        except IntegrityError as exc:  # acted on at rank 0's next step
            self.error = exc
        sink.flush()
