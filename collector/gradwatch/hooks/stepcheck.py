"""Connects one optimizer's hooks to the run's :class:`~gradwatch.checks.engine.CheckEngine`:
builds the host-side view of each step and decides when device values are looked at."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from gradwatch.checks.engine import CheckEngine
from gradwatch.checks.findings import Action
from gradwatch.checks.view import Pending, StepView, Window
from gradwatch.core import checkids
from gradwatch.stats.tensors import GRAD, NONFINITE, PARAM, UPDATE, PreStep, StepValues

if TYPE_CHECKING:
    from gradwatch.checks.view import WatchedOptimizer
    from gradwatch.transport.record_builder import StepMeta

MUTATION_EVERY = 10  # collected steps between checks for edits outside step()


def _never() -> bool:
    return False


def input_checksums(metas: list[StepMeta]) -> list[list[list[float]] | None]:
    """Per step of a window, the checksum of each forward's inputs apart (``None`` for a
    step of fewer than two forwards), on the host. Device checksums come over in one
    transfer per window, on the I/O thread; a deferred one whose inputs were already read
    for the step's sum (the hold budget ran out in between) is unknown (NaN)."""
    from gradwatch.stats.batch_checksum import WIDTH, Deferred

    unknown = [float("nan")] * WIDTH
    on_device: list[torch.Tensor] = []
    out: list[list[list[float]] | None] = []
    for m in metas:
        if m.inputs is None:
            out.append(None)
            continue
        row: list[list[float]] = []
        for x in m.inputs:
            if isinstance(x, Deferred):
                row.append(x.resolve().tolist() if x.parts else unknown)
            else:
                row.append([])  # filled in below, from one transfer
                on_device.append(x.reshape(-1).to(torch.float64))
        out.append(row)
    if on_device:
        try:
            moved = torch.stack(on_device).cpu()
        except RuntimeError:  # checksums on several devices
            moved = torch.stack([t.cpu() for t in on_device])
        values = iter(moved.tolist())
        for row_ in out:
            for i, v in enumerate(row_ or []):
                if not v:
                    row_[i] = next(values)  # type: ignore[index]
    return out


class StepChecker:
    """The checks of one optimizer's steps."""

    def __init__(self, watch: WatchedOptimizer, engine: CheckEngine) -> None:
        self.w = watch
        self.engine = engine
        self.live = watch.stats.device.type == "cpu"
        self._view: StepView | None = None
        self._values_live = False
        self._last: tuple[int, StepValues] | None = None  # the previous collected step
        # the facts of a quiet step (no StepView built): step, learning rates, requires_grad
        self._facts: tuple[int, list[float], list[bool]] | None = None
        self._eps = [
            torch.finfo(p.dtype).eps if p.is_floating_point() else 0.0 for p in watch.params
        ]

    def view(self, step: int, pending: Pending, has_grad: list[bool], lr: list[float]) -> StepView:
        """The host-side facts of a step."""
        w = self.w
        return StepView(
            optimizer=w.index,
            step=step,
            names=w.names,
            numel=w.numel,
            requires_grad=[p.requires_grad for p in w.params],
            has_grad=has_grad,
            n_backward=pending.n_backward,
            since_clear=w.since_clear,
            events=pending.events,
            lr=lr,
            group_of=w.group_of,
            shapes=w.shapes,
            order=w.forward_order or list(range(len(w.params))),
            eps=self._eps,
        )

    def requires_grad(self) -> list[bool] | None:
        """``requires_grad`` of every tensor as read before this step."""
        if self._facts is not None:
            return self._facts[2]
        return None if self._view is None else self._view.requires_grad

    def lr(self) -> list[float] | None:
        """The learning rates read before this step (read once per step)."""
        if self._facts is not None:
            return self._facts[1]
        return None if self._view is None else self._view.lr

    def pre_step(self, pending: Pending, pre: PreStep | None, closure: bool) -> Action:
        """Before the update; returns ``skip`` when a policy drops this update."""
        w = self.w
        step = w.step + 1
        if step == 1 and pre is not None and not w.stats.grads_only:
            self._initial_norms()
        if step == 1 and self.engine.on(checkids.LR_TOO_LARGE):
            self.engine.lr.arm(w, step, w.learning_rates())
        if self.engine.quiet(w, step, closure):
            # the common step: nothing holds, so no StepView is built
            self._view = None
            self._facts = (step, w.learning_rates(), [p.requires_grad for p in w.params])
            if pre is not None and self.live and step % MUTATION_EVERY == 0:
                self._mutation(self.view(step, pending, pre.has_grad, self._facts[1]))
            return "none"
        self._facts = None
        has_grad = pre.has_grad if pre is not None else [p.grad is not None for p in w.params]
        v = self.view(w.step + 1, pending, has_grad, w.learning_rates())
        v.has_closure = closure
        if pre is not None and pre.grad_norm is not None and self.engine.needs_values_now():
            v.grad_norm = pre.grad_norm.to("cpu", torch.float64)
            v.nonfinite = (
                torch.zeros(len(w.params), dtype=torch.float64)
                if pre.nonfinite is None
                else pre.nonfinite.to("cpu", torch.float64)
            )
            v.loss = None if pending.loss is None else float(pending.loss)
            self._batch_scale_now(v.step, pending)
        if pre is not None and self.live:
            self._mutation(v)
        self._view = v
        return self.engine.pre_step(w, v)

    def _batch_scale_now(self, step: int, pending: Pending) -> None:
        """A value check acts before the update (policy raise, skip or checkpoint): this
        step's batch scale is read now, before the checks, so that a finding the batch
        explains is led by it as on the I/O thread's path (which then leaves the batch
        scales to this one: each step is observed once, in step order)."""
        from gradwatch.stats.batch_checksum import float_elements, resolve

        scale: float | None = None
        if pending.batch is not None:
            pending.batch = checksum = resolve(pending.batch)  # read once, kept for the row
            k = float_elements(pending.batch_sig)
            scale = float(checksum[2]) / k if k and checksum.numel() > 2 else None
        self.engine.batches.observe(self.w.index, [step], [scale])

    def _initial_norms(self) -> None:
        """‖θ‖ before the first update, for the first step's update ratio (every later
        step divides by the previous step's ‖θ‖ after its update) and exploding-grad's
        floor."""
        if self.engine.on(checkids.UPDATE_RATIO) or self.engine.on(checkids.EXPLODING_GRAD):
            self.engine.numerics.set_initial(self.w.index, self.w.stats.param_norms())

    def _mutation(self, v: StepView) -> None:
        last = self._last
        due = last is not None and last[0] == v.step - 1 and v.step % MUTATION_EVERY == 0
        due = due and self.w.manual is None  # by hand, every update happens outside step()
        if not due or not self.engine.on(checkids.PARAM_MUTATED_OUTSIDE_STEP):
            return
        assert last is not None
        coverage = self.engine.coverage
        coverage.mutated(
            v, last[1].param_norm, self.w.stats.param_norms(), self.w.stepped_by_others()
        )

    def post_step(self, values: StepValues | None) -> None:
        """After the update (``values``: this step's statistics, ``None`` if not collected).
        The value checks of collected steps run later, on the I/O thread (``check_rows``)."""
        v, self._view = self._view, None
        facts, self._facts = self._facts, None
        step = v.step if v is not None else facts[0] if facts is not None else None
        if step is not None and values is not None and self.live:
            self._last = (step, values)

    def check_rows(
        self, data: torch.Tensor, metas: list[StepMeta], behind: Callable[[], bool] = _never
    ) -> None:
        """Check a window of collected steps on the I/O thread, once it is on the host: the
        value checks (unless a raise/skip policy already ran them before the update), the
        update-based checks and the loss curve. Never touches the training thread.

        Runs of rows on which nothing is found are checked together in a few tensor ops
        (:meth:`CheckEngine.take_rows`); any other row on its own (:meth:`_check_row`).
        Between rows the thread offers the GIL to training, unless ``behind()`` says that
        more rows are already waiting: then it works through them without yielding, and
        training shares the GIL with it instead of the backlog growing in memory."""
        values_done = self.engine.needs_values_now()
        win = self._window(data, metas)
        if not values_done:  # otherwise each step's batch was observed before its update
            self.engine.batches.observe(self.w.index, win.steps, win.batch_scale)
        from gradwatch.stats.rows import LEADING

        summed = [bool(m.batch) for m in metas]  # a checksum was taken (an input tensor)
        inputs = input_checksums(metas) if self.engine.on(checkids.REPEATED_BATCH) else None
        clocks = [m.clock or m.step for m in metas]
        self.engine.window(self.w, win, data[:, 1:LEADING].tolist(), summed, inputs, clocks)
        quiet = self.engine.quiet_rows(self.w, win, values_done)
        r, rows = 0, len(metas)
        if rows > 1 and not any(quiet):  # perhaps the histories start with this window
            self._check_row(data[0], metas[0], values_done)
            quiet = self.engine.quiet_rows(self.w, win, values_done)
            r = 1
        while r < rows:
            if quiet[r] and self.engine.rows_idle(self.w, values_done):
                end = r + 1
                while end < rows and quiet[end]:
                    end += 1
                taken = self.engine.take_rows(self.w, win, r, end, values_done)
                if taken:
                    r += taken
                    if not behind():
                        time.sleep(0)  # let the training thread take the GIL
                    continue
            self._check_row(data[r], metas[r], values_done)
            r += 1
            if not behind():
                time.sleep(0)

    def finite_window(self, data: torch.Tensor, metas: list[StepMeta]) -> bool:
        """Whether no row of the window holds a non-finite gradient norm, a non-finite
        gradient count or a non-finite loss (a window with one is checked even when the
        checks are behind: see :meth:`gradwatch.hooks.pipeline.StepPipeline.check_rows`)."""
        win = self._window(data, metas)
        return (
            bool(torch.isfinite(win.grad_norm).all())
            and not bool(win.nonfinite.any())
            and all(x is None or math.isfinite(x) for x in win.loss)
        )

    def _window(self, data: torch.Tensor, metas: list[StepMeta]) -> Window:
        from gradwatch.stats.batch_checksum import float_elements
        from gradwatch.stats.rows import BATCH_ABS, LEADING

        n = len(self.w.params)
        stats = data[:, LEADING:].reshape(len(metas), 4, n)  # stat-major rows
        losses = data[:, 0].tolist()
        trainable = [p.requires_grad for p in self.w.params]
        return Window(
            grad_norm=stats[:, GRAD],
            nonfinite=stats[:, NONFINITE],
            param_norm=stats[:, PARAM],
            update_norm=stats[:, UPDATE],
            loss=[x if m.has_loss else None for x, m in zip(losses, metas, strict=True)],
            steps=[m.step for m in metas],
            lr=[m.lr for m in metas],
            batch_scale=[
                (float(a) / k if (k := float_elements(m.batch)) else None)
                for a, m in zip(data[:, BATCH_ABS].tolist(), metas, strict=True)
            ],
            plain=[
                all(m.has_grad) and all(trainable if m.requires_grad is None else m.requires_grad)
                for m in metas
            ],
        )

    def _check_row(self, row: torch.Tensor, meta: StepMeta, values_done: bool) -> None:
        """The checks of one collected row (the reference path)."""
        from gradwatch.stats.rows import LEADING

        pending = Pending(n_backward=meta.n_backward, events=meta.events)
        v = self.view(meta.step, pending, meta.has_grad, meta.lr)
        if meta.requires_grad is not None:
            v.requires_grad = meta.requires_grad
        stats = row[LEADING:].reshape(4, len(self.w.params))  # stat-major
        v.loss = float(row[0]) if meta.has_loss else None
        v.grad_norm, v.nonfinite = stats[GRAD], stats[NONFINITE]
        v.param_norm, v.update_norm = stats[PARAM], stats[UPDATE]
        self.engine.learning_rates(v)
        if not values_done:
            self.engine.values(v)
        self.engine.post_step(v)

    def finish(self) -> StepView:
        """At close: the last view, for the final checks."""
        return self.view(
            self.w.step,
            self.w.pending,
            [p.grad is not None for p in self.w.params],
            self.w.learning_rates(),
        )
