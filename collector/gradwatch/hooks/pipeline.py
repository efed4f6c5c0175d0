"""The per-step work of a run on its I/O thread, in one object: a window of step rows goes
from the optimizer's hooks through the checks to the writer without returning to the
session.

On the training thread an optimizer watch hands a window's *reader* to :meth:`StepPipeline.emit`
(one call per window of rows: every 256 steps or 0.5 s on the CPU, every 10 steps on an
accelerator), which queues one callable on the writer (:class:`gradwatch.transport.writer.RunIO`)
and returns. On the I/O thread that callable waits for the transfer, then, in this order:

1. adds the window to the optimizer's structure record (:mod:`gradwatch.core.structure.recorder`);
2. runs the row checks (:meth:`gradwatch.hooks.stepcheck.StepChecker.check_rows`: the value,
   update and loss checks, findings to the sink), unless they fell behind training;
3. gives the window to the cross-rank checks, when the run is one rank of a job (``ranks``,
   :class:`gradwatch.ddp.ranks.RankSync`, set by the session);
4. builds the STEPS record (:func:`gradwatch.transport.record_builder.steps_record`), which
   the writer appends to the spool.

The user's scalars (``run.log``) wait here too and follow the first optimizer's window. At
close, :meth:`StepPipeline.finish` drains the last rows, runs the final checks and stores the
structure findings. The session builds one pipeline per run and wires it into the run's
context (``ctx.pipeline``); nothing here reads the session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from gradwatch.checks.findings import finding
from gradwatch.core import checkids
from gradwatch.core.errors import IntegrityError
from gradwatch.core.structure.recorder import Recorder
from gradwatch.transport import record_builder as records

if TYPE_CHECKING:
    import torch

    from gradwatch.core.wire import Record
    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch
    from gradwatch.stats.transfer import Reader
    from gradwatch.transport.record_builder import StepMeta

#: records waiting behind a window of rows beyond which its checks are skipped (when every
#: value in it is finite): on the CPU a tiny model can step faster than the checks run
CHECKS_BACKLOG = 8
FINAL_CHECKS_WAIT = 10.0  # close() waits this long for the checks of the last rows
SCALARS_PER_RECORD = 512  # run.log values that make one SCALARS record


class RowObserver(Protocol):
    """Something else that reads each window of rows on the I/O thread (the cross-rank
    checks: :meth:`gradwatch.ddp.ranks.RankSync.observe`). Never raises."""

    def observe(self, watch: OptimizerWatch, data: torch.Tensor, metas: list[StepMeta]) -> None: ...


class StepPipeline:
    """One run's per-step work on the I/O thread: structure, row checks, records."""

    def __init__(self, ctx: HookContext[OptimizerWatch]) -> None:
        self.ctx = ctx
        self.io = ctx.io
        self.sink = ctx.sink
        self.watches = ctx.watches
        #: each optimizer's step signatures (structure findings); None when both structure
        #: checks are off, or after an internal error
        self.structure: list[Recorder] | None = (
            [Recorder(w.names) for w in ctx.watches]
            if self.sink.enabled(checkids.STRUCTURE_CHANGE)
            or self.sink.enabled(checkids.STRUCTURE_SAFEGUARD)
            else None
        )
        #: whether the structure findings were stored at close (the END record says so)
        self.structure_stored = False
        self.ranks: RowObserver | None = None  # set by the session in a multi-rank job
        self.unchecked_steps = 0  # written while the checks were behind (see check_rows)
        self.checks_closed = False  # the final checks ran: later rows are only written
        self._behind = False  # the checks fell behind once (said once)
        #: run.log's values waiting for the next SCALARS record: (step, key, value)
        self.scalars: list[tuple[int, str, float | torch.Tensor]] = []

    # -- training thread ---------------------------------------------------------------------
    def emit(self, watch: OptimizerWatch, reader: Reader[StepMeta]) -> None:
        """Queue a window of rows; the transfer is waited for on the I/O thread."""
        index, n_tensors = watch.index, len(watch.params)

        def build() -> Record:
            data, metas = reader()
            self.observe_structure(index, metas)
            self.check_rows(watch, data, metas)
            if self.ranks is not None:
                self.ranks.observe(watch, data, metas)
            return records.steps_record(index, n_tensors, data, metas)

        self.io.submit(build)
        if index == 0 and self.scalars:
            self.emit_scalars()

    def emit_scalars(self) -> None:
        """Queue the waiting ``run.log`` values as one SCALARS record."""
        if self.scalars:
            entries, self.scalars = self.scalars, []
            self.io.submit(lambda: records.scalars_record(entries))

    def drain(self) -> None:
        """Queue the rows still waiting for a transfer in every optimizer (flush, close)."""
        for watch in self.watches:
            reader = watch.drain()
            if reader is not None:
                self.emit(watch, reader)

    # -- I/O thread ----------------------------------------------------------------------------
    def observe_structure(self, index: int, metas: list[Any]) -> None:
        """Add a window of steps to the optimizer's structure record."""
        if self.structure is None:
            return
        try:
            self.structure[index].observe(metas)
        except Exception as exc:
            self.ctx.internal_errors += 1
            self.structure = None  # an incomplete sequence would show changes that are not
            self.ctx.report_once("structure", f"internal error in the structure record ({exc})")

    def check_rows(self, watch: OptimizerWatch, data: torch.Tensor, metas: list[Any]) -> None:
        """The row checks of a window: a failing check must not cost the record its place
        on disk.

        When the checks fall behind training (more than ``CHECKS_BACKLOG`` records wait),
        a window whose values are all finite is written unchecked, so that the backlog
        drains instead of growing in memory; a window with a NaN or ±Inf is always
        checked. Said once on stderr and in a NOTICE record."""
        if self.checks_closed:
            return
        io = self.io
        if io.backlog() > CHECKS_BACKLOG and watch.checker.finite_window(data, metas):
            self.unchecked_steps += len(metas)
            if not self._behind:
                self._behind = True
                io.submit(records.notice_record({"notice": "checks-behind", "step": metas[0].step}))
                self.ctx.report_once(
                    "checks behind",
                    f"the integrity checks fell behind training at step {metas[0].step} "
                    f"(more than {CHECKS_BACKLOG} records waiting); steps are still recorded, "
                    "and while behind, windows without NaN/Inf are not checked. Checking every "
                    "step of a model this fast costs more than its step: use watch(every=K) "
                    "to check every K-th step",
                )
            return
        try:
            watch.checker.check_rows(data, metas, lambda: io.backlog() > 0)
        except IntegrityError:
            pass  # a raise policy acts in real time; here it is recorded already
        except Exception as exc:
            self.ctx.internal_errors += 1
            self.ctx.report_once(
                "row checks",
                f"internal error in the checks ({type(exc).__name__}"
                f": {exc}); training continues, some checks may be incomplete",
            )

    # -- close ---------------------------------------------------------------------------------
    def finish(self) -> None:
        """At close, on the training thread: the last updates by hand, the rows still
        waiting (checked on the I/O thread, waited for up to ``FINAL_CHECKS_WAIT``), the
        checks of the run's end, then the structure findings. Never raises but a policy's
        ``IntegrityError``."""
        ctx = self.ctx
        try:
            for watch in self.watches:
                if watch.manual is not None:
                    watch.manual.check()  # the last update by hand
            self.drain()
            self.io.flush(FINAL_CHECKS_WAIT)  # the I/O thread checks the last rows
            self.checks_closed = True
            ctx.checks.close([watch.checker.finish() for watch in self.watches])
        except Exception as exc:  # never let a check break close()
            ctx.internal_errors += 1
            ctx.report_once("final checks", f"internal error in the final checks ({exc})")
        self._structure_findings()

    def _structure_findings(self) -> None:
        """Store where the run's structure changed for good and the safeguards it dropped
        (:mod:`gradwatch.core.structure.recorder`), as findings of the run."""
        recorders = self.structure
        if recorders is None or not all(r.within_bounds() for r in recorders):
            return  # the readers derive them, with their own bounds
        try:
            for o, recorder in enumerate(recorders):
                label = f" (optimizer {o})" if len(recorders) > 1 else ""
                for f in recorder.findings(label):
                    self.sink.clear(f["check"], None, o)  # each change is an event of its own
                    self.sink.report(
                        finding(
                            f["check"],
                            f["step"],
                            f["message"],
                            f["hint"],
                            severity=f["severity"],
                            optimizer=o,
                            details=f["details"],
                        )
                    )
            self.structure_stored = True
        except IntegrityError:
            self.structure_stored = True  # policy raise: stored, then raised at close
        except Exception as exc:
            self.ctx.internal_errors += 1
            self.ctx.report_once("structure", f"internal error in the structure findings ({exc})")
