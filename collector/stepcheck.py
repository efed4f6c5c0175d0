"""Connects one optimizer's hooks to the run's :class:`~gradwatch.checks.CheckEngine`:
builds the host-side view of each step and decides when device values are looked at."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch

from gradwatch.checks import CheckEngine
from gradwatch.checks.view import StepView
from gradwatch.findings import Action
from gradwatch.stats import GRAD, NONFINITE, PARAM, UPDATE, PreStep, fused_norms
from gradwatch.transfer import Reader

if TYPE_CHECKING:
    from gradwatch.lifecycle import OptimizerWatch, Pending, StepMeta

MUTATION_EVERY = 10  # collected steps between checks for edits outside step()


def _has_closure(args: Any, kwargs: Any) -> bool:
    return any(callable(a) for a in (*args, *kwargs.values()))


class StepChecker:
    """The checks of one optimizer's steps."""

    def __init__(self, watch: OptimizerWatch, engine: CheckEngine) -> None:
        self.w = watch
        self.engine = engine
        self.live = watch.stats.device.type == "cpu"
        self._view: StepView | None = None
        self._values_live = False
        self._last_norms: tuple[int, torch.Tensor] | None = None
        self._late: Reader[StepMeta] | None = None
        self._late_lock = threading.Lock()

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
        )

    def lr(self) -> list[float] | None:
        """The learning rates read before this step (read once per step)."""
        return None if self._view is None else self._view.lr

    def pre_step(self, pending: Pending, pre: PreStep | None, args: Any, kwargs: Any) -> Action:
        """Before the update; returns ``skip`` when a policy drops this update."""
        w = self.w
        has_grad = pre.has_grad if pre is not None else [p.grad is not None for p in w.params]
        v = self.view(w.step + 1, pending, has_grad, w.learning_rates())
        v.has_closure = _has_closure(args, kwargs)
        self._values_live = pre is not None and (self.live or self.engine.needs_values_now())
        if self._values_live and pre is not None:
            v.grad_norm, v.nonfinite = pre.grad_norm.cpu(), pre.nonfinite.cpu()
            v.loss = None if pending.loss is None else float(pending.loss)
            self._mutation(v)
        self._view = v
        return self.engine.pre_step(w, v)

    def _mutation(self, v: StepView) -> None:
        last = self._last_norms
        if (
            not self.live
            or last is None
            or last[0] != v.step - 1
            or v.step % MUTATION_EVERY != 0
            or not self.engine.on("param-mutated-outside-step")
        ):
            return
        now = fused_norms([p.detach() for p in self.w.params], self.w.stats.device)
        self.engine.coverage.mutated(v, last[1], now)

    def post_step(self, matrix: torch.Tensor | None, reader: Reader[StepMeta] | None) -> None:
        """After the update (``matrix``: this step's statistics, ``None`` if not collected)."""
        v, self._view = self._view, None
        if v is None:
            return
        if matrix is not None and self.live:
            v.param_norm, v.update_norm = matrix[:, PARAM], matrix[:, UPDATE]
            self._last_norms = (v.step, v.param_norm)
            self.engine.post_step(v)
        elif matrix is None:
            self.engine.post_step(v)  # loss-curve checks still see a live loss, if any
        if reader is not None and not self.live:
            self._evaluate_late(reader)

    def _evaluate_late(self, newest: Reader[StepMeta] | None) -> None:
        """Accelerators: check the previous transfer window, whose copy has most likely
        finished by now (so reading it costs no pipeline stall)."""
        with self._late_lock:
            previous, self._late = self._late, newest
        if previous is None:
            return
        data, metas = previous()
        for row, meta in zip(data, metas, strict=True):
            self._check_row(row, meta)

    def _check_row(self, row: torch.Tensor, meta: StepMeta) -> None:
        from gradwatch.lifecycle import LEADING, Pending

        pending = Pending(n_backward=meta.n_backward, events=meta.events)
        v = self.view(meta.step, pending, meta.has_grad, meta.lr)
        stats = row[LEADING:].reshape(len(self.w.params), 4)
        v.loss = float(row[0]) if meta.has_loss else None
        v.grad_norm, v.nonfinite = stats[:, GRAD], stats[:, NONFINITE]
        v.param_norm, v.update_norm = stats[:, PARAM], stats[:, UPDATE]
        if not self.engine.needs_values_now():  # else they were checked in real time
            self.engine.values(v)
        self.engine.post_step(v)

    def post_drain(self, reader: Reader[StepMeta]) -> None:
        """Rows handed over early (flush, close) are checked too."""
        if not self.live:
            self._evaluate_late(reader)

    def finish(self) -> StepView:
        """At close: check what is still waiting; returns the last view for final checks."""
        self._evaluate_late(None)
        return self.view(
            self.w.step,
            self.w.pending,
            [p.grad is not None for p in self.w.params],
            self.w.learning_rates(),
        )
