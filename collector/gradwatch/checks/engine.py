"""The check engine: runs the in-process checks of the catalogue (ids in
:mod:`gradwatch.core.catalogue`) on one optimizer's steps.

*When* each check runs:

* host facts (lifecycle, coverage, modes) — in real time, in the step pre-hook, before the
  update is applied, so ``raise`` and ``skip`` act on the bad update itself;
* device values (loss, gradient norms and counts) — on the CPU in real time too; on an
  accelerator they reach the host with the batched transfer and are checked one transfer
  window later, unless a check that needs them has policy ``raise`` or ``skip``: then that
  step's values are copied to the host at once (one synchronisation per step — the price
  of acting before the update);
* update-based checks (``update-ratio``, ``nonfinite-param``, …) after the step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradwatch.checks import loss as loss_checks
from gradwatch.checks import twins
from gradwatch.checks.batchscale import BatchScales
from gradwatch.checks.chance import LossAtChance
from gradwatch.checks.clipping import ClipChecks
from gradwatch.checks.coverage import CoverageChecks
from gradwatch.checks.findings import Action, FindingSink, finding
from gradwatch.checks.lifecycle import IDS as LIFECYCLE_IDS
from gradwatch.checks.lifecycle import KEPT as LIFECYCLE_KEPT
from gradwatch.checks.lifecycle import LifecycleChecks
from gradwatch.checks.lr import LrChecks
from gradwatch.checks.numerics import NumericsChecks
from gradwatch.checks.repeated import RepeatedBatch
from gradwatch.checks.view import StepView, Window
from gradwatch.core import checkids
from gradwatch.core.checks import REGISTRY
from gradwatch.core.checks import lr as lr_family
from gradwatch.fingerprint.take import nondeterminism_risks

if TYPE_CHECKING:
    from gradwatch.checks.view import WatchedOptimizer

#: the checks of the step's pre-update device values (:meth:`CheckEngine.values`), read
#: from the registry (each declares ``row="values"``)
VALUE_CHECKS = REGISTRY.reading("values")
#: the checks :meth:`CheckEngine.pre_step` runs on every step (not the periodic ones) whose
#: holding condition the full path must clear when it ends
_REAL_TIME = frozenset(
    {*LIFECYCLE_IDS, checkids.EVAL_MODE_TRAINING, checkids.CLIP_BEFORE_BACKWARD}
) - (LIFECYCLE_KEPT)
#: the checks that run on each collected row (:meth:`CheckEngine.values` and ``post_step``):
#: every check of the registry that declares ``row``
ROW_CHECKS = REGISTRY.reading("values", "update")
#: the learning-rate family's checks (the registry's), observed together on each row
LR_CHECKS = tuple(c.id for c in lr_family.FAMILY.checks)
COVERAGE_EVERY = 50  # steps between re-checks of optimizer coverage and frozen tensors


class CheckEngine:
    """Runs every enabled check of one run and applies the policies through its sink."""

    def __init__(
        self,
        sink: FindingSink,
        *,
        accumulation_steps: int | None,
        models: Mapping[str, nn.Module],
        allow_mutation: tuple[str, ...] = (),
    ) -> None:
        self.sink = sink
        self.lifecycle = LifecycleChecks(sink, accumulation_steps)
        self.coverage = CoverageChecks(sink, allow_mutation)
        self.numerics = NumericsChecks(sink)
        self.losses = loss_checks.LossChecks(sink)
        self.lr = LrChecks(sink)
        self.coverage.stalled = self.lr.stalled  # a collapsed LR is named before its effect
        self.lifecycle.by_hand = self._by_hand
        self.losses.diverged = self.lr.diverged  # a divergence makes a too-large LR an error
        self.lr.first_update = self.numerics.first_update  # …or names it, after a huge first step
        #: outlier input batches, named in the symptoms they cause (see checks.batchscale)
        self.batches = BatchScales()
        sink.annotate = self.batches.annotate
        self.numerics.outlier = self.batches.outlier  # a jump an outlier batch explains
        self.repeats = RepeatedBatch(sink)  # repeated-batch
        self.clips = ClipChecks(sink)  # clip-before-backward
        self.chance = LossAtChance(sink)  # loss-at-chance
        self.models = dict(models)
        self.modes = {k: loss_checks.mode_dependent_modules(m) for k, m in models.items()}
        self.shape_skip = False
        self.watches: Sequence[WatchedOptimizer] = ()
        self._on: dict[str, bool] = {}
        self._values_now: bool | None = None
        #: check every collected row on its own (the reference path that windows of quiet
        #: rows must agree with; tests and benchmarks/row_checks.py compare the two)
        self.row_by_row = False

    def on(self, check: str) -> bool:
        """Whether ``check`` is evaluated (policies are fixed for the run: asked once)."""
        found = self._on.get(check)
        if found is None:
            found = self._on[check] = self.sink.enabled(check)
        return found

    def needs_values_now(self) -> bool:
        """Whether some value check must act before the update (raise/skip policy)."""
        if self._values_now is None:
            self._values_now = any(self.sink.wants_action(c) for c in VALUE_CHECKS)
        return self._values_now

    # -- at start ---------------------------------------------------------------------------
    def at_start(self, fingerprint: dict[str, Any], watches: Sequence[WatchedOptimizer]) -> None:
        """Checks that need only the fingerprint and the model/optimizer layout."""
        if self.on(checkids.NONDETERMINISM_RISK):
            risks = nondeterminism_risks(fingerprint)
            if risks:
                self.sink.report(
                    finding(
                        checkids.NONDETERMINISM_RISK,
                        0,
                        f"{len(risks)} settings make repeated runs differ, e.g. {risks[0]['why']}",
                        risks[0]["fix"],
                        details={"risks": risks},
                    )
                )
        self.watches = watches
        self.lr.watches = watches
        self.check_coverage(watches, 0)
        self.sink.flush()

    def _by_hand(self, o: int) -> bool:
        """Whether optimizer ``o`` stands for a loop that updates its parameters by hand."""
        return any(w.index == o and w.manual is not None for w in self.watches)

    def check_coverage(self, watches: Sequence[WatchedOptimizer], step: int) -> None:
        """``param-not-in-optimizer`` over every watched model."""
        if not self.on(checkids.PARAM_NOT_IN_OPTIMIZER):
            return
        held = {id(p) for w in watches for g in w.optimizer.param_groups for p in g["params"]}
        missing: list[str] = []
        for k, m in self.models.items():
            names = [n for n, p in m.named_parameters() if p.requires_grad and id(p) not in held]
            adapters = twins.adapters_only(m, held) if names else 0
            if adapters:
                self.coverage.frozen_base([f"{k}.{n}" if k else n for n in names], adapters, step)
                continue
            missing += [f"{k}.{n}" if k else n for n in names]
        if missing:
            missing = self._left_out(missing, held, step)
        self.coverage.not_in_optimizer(missing, step)

    def _left_out(self, missing: list[str], held: set[int], step: int) -> list[str]:
        """``missing`` less the tensors of copies of trained modules the loss does not
        reach (:mod:`gradwatch.checks.twins`), which are said as info; before the first
        backward (``step`` 0) whether the loss reaches a copy is not known yet, so its
        tensors wait for the check of step 1."""
        kept: list[twins.Copy] = []
        for copy in twins.copies(self.models, held):
            if step == 0 or not copy.reached():
                kept.append(copy)
        if step > 0 and kept:
            self.coverage.copies_kept(kept, step)
        out = tuple(f"{c.path}." for c in kept)
        return [n for n in missing if not n.startswith(out)]

    # -- around the step --------------------------------------------------------------------
    def quiet(self, w: WatchedOptimizer, step: int, closure: bool) -> bool:
        """Whether :meth:`pre_step` would find, clear and do nothing for ``w``'s step
        ``step`` — checked on the raw facts, so the common step builds no :class:`StepView`.
        Conservative: anything unusual takes the full path."""
        if self.shape_skip or step % COVERAGE_EVERY == 1 or self.needs_values_now():
            return False
        if self.sink.holds_any(_REAL_TIME):
            return False  # a condition holds: the full path clears it when it ends
        pending = w.pending
        if not self.lifecycle.quiet(pending.n_backward, w.since_clear, pending.events, closure):
            return False
        if self.on(checkids.CLIP_BEFORE_BACKWARD) and not self.clips.quiet(w.index, pending.events):
            return False
        if self.on(checkids.EVAL_MODE_TRAINING):
            for key in w.model_keys:
                if not loss_checks.all_training(self.models[key], self.modes[key]):
                    return False
        return True

    def pre_step(self, w: WatchedOptimizer, v: StepView) -> Action:
        """Before the update: lifecycle, modes, coverage, and values when on the host."""
        actions: list[Action] = []
        if any(self.on(c) for c in LIFECYCLE_IDS):
            # a cut backward is reported as param-no-grad, under its own policy
            actions += [
                a
                for a, c in zip(self.lifecycle.pre_step(v), LIFECYCLE_IDS, strict=True)
                if self.on(c) or c == checkids.STEP_WITHOUT_BACKWARD
            ]
        if self.on(checkids.CLIP_BEFORE_BACKWARD):
            actions.append(self.clips.pre_step(v))
        if self.on(checkids.EVAL_MODE_TRAINING):
            for key in w.model_keys:
                actions.append(
                    loss_checks.eval_mode(self.sink, v.step, self.models[key], self.modes[key])
                )
            # one finding while any watched model trains in eval(): a GAN whose generator
            # is in eval() reports once, not again after each step of its discriminator
            if self.sink.active(checkids.EVAL_MODE_TRAINING) and all(
                loss_checks.all_training(self.models[k], self.modes[k]) for k in self.models
            ):
                self.sink.clear(checkids.EVAL_MODE_TRAINING)
        if v.step % COVERAGE_EVERY == 1:
            if self.on(checkids.FROZEN_PARAM_IN_OPTIMIZER):
                self.coverage.frozen(v)
            if v.optimizer == 0:  # layers replaced after watch(): a fresh look now and then
                self.check_coverage(self.watches, v.step)
        if v.has_values:
            actions += self.values(v)
        if self.shape_skip:
            self.shape_skip = False
            actions.append("skip")
        self.sink.flush()
        return "skip" if "skip" in actions else "none"

    def learning_rates(self, v: StepView) -> None:
        """``lr-jump``, ``lr-collapse`` and ``lr-too-large`` on one collected row (first: a
        learning rate is the cause of what the other checks find at the same step)."""
        if any(self.on(c) for c in LR_CHECKS):
            self.lr.observe(v.optimizer, v.step, v.lr)

    def values(self, v: StepView) -> list[Action]:
        """Checks of the pre-step device values (real time, or one window late)."""
        actions: list[Action] = []
        if self.on(checkids.NONFINITE_LOSS):
            actions.append(self.numerics.loss(v))
        if v.loss is not None and not math.isfinite(v.loss):
            self.lr.diverged(v.optimizer, v.step, f"the loss became {v.loss}")
        if self.on(checkids.NONFINITE_GRAD) or self.on(checkids.EXPLODING_GRAD):
            actions += self.numerics.grads(v)
        if self.on(checkids.PARAM_NO_GRAD):
            actions += self.coverage.no_grad(v)
        return actions

    def post_step(self, v: StepView) -> None:
        """After the update: parameters, update sizes, the loss curve."""
        if v.param_norm is not None and v.update_norm is not None and v.grad_norm is not None:
            if self.on(checkids.NONFINITE_PARAM):
                self.numerics.params(v)
            if self.on(checkids.UPDATE_RATIO):
                self.numerics.update_ratio(v)
            if self.on(checkids.VANISHING_GRAD):
                self.numerics.vanishing(v)
            if self.on(checkids.PARAM_NOT_UPDATED) or self.on(checkids.FROZEN_PARAM_CHANGED):
                self.coverage.after_update(v)
        if self.on(checkids.LOSS_DIVERGING) or self.on(checkids.LOSS_PLATEAU):
            self.losses.observe(v)
        self.sink.flush()

    # -- a window of rows at once (gradwatch.hooks.stepcheck) ------------------------------------
    # values() and post_step() are the reference, one row at a time. Rows on which they
    # would find nothing, only extending their histories, are taken many at once here; any
    # other row goes through them. Policies that act (raise, skip, checkpoint) keep every
    # row on the reference path.

    def quiet_rows(self, w: WatchedOptimizer, win: Window, values_done: bool) -> list[bool]:
        """Per row of ``win``: whether the row checks would report and clear nothing, and
        start no streak, provided the histories are idle (:meth:`rows_idle`)."""
        rows = len(win)
        if self.row_by_row or any(self.sink.wants_action(c) for c in ROW_CHECKS):
            return [False] * rows
        quiet = torch.tensor(win.plain, dtype=torch.bool)
        if not values_done:
            if self.on(checkids.NONFINITE_LOSS):
                finite = [x is None or math.isfinite(x) for x in win.loss]
                quiet &= torch.tensor(finite, dtype=torch.bool)
            if self.on(checkids.NONFINITE_GRAD):
                quiet &= (win.nonfinite == 0).all(dim=1)
            exploding, vanishing = (
                self.on(checkids.EXPLODING_GRAD),
                self.on(checkids.VANISHING_GRAD),
            )
            if exploding or vanishing or self.on(checkids.NONFINITE_GRAD):
                order = w.forward_order or list(range(len(w.params)))
                grads = self.numerics.quiet_rows(w.index, win, order, exploding, vanishing)
                if grads is None:
                    return [False] * rows
                quiet &= grads
            if self.on(checkids.PARAM_NO_GRAD):  # a tensor the loss does not depend on is zero
                expected = self.coverage.invariant(w.index, win.grad_norm.shape[1])
                quiet &= ((win.grad_norm != 0) | expected).all(dim=1)
        if self.on(checkids.NONFINITE_PARAM):
            quiet &= torch.isfinite(win.param_norm).all(dim=1)
        if self.on(checkids.PARAM_NOT_UPDATED) or self.on(checkids.FROZEN_PARAM_CHANGED):
            quiet &= (win.update_norm != 0).all(dim=1)
        if self.on(checkids.UPDATE_RATIO) and not self.numerics.has_history(w.index):
            return [False] * rows
        result: list[bool] = quiet.tolist()
        return result

    def rows_idle(self, w: WatchedOptimizer, values_done: bool) -> bool:
        """Whether every per-row history of ``w`` is in the state that quiet rows keep."""
        o = w.index
        if not values_done:
            numerics = self.on(checkids.NONFINITE_GRAD) or self.on(checkids.EXPLODING_GRAD)
            vanishing = self.on(checkids.VANISHING_GRAD)
            exploding = self.on(checkids.EXPLODING_GRAD)
            if (numerics or vanishing) and not self.numerics.rows_idle(o, vanishing, exploding):
                return False
            if self.on(checkids.PARAM_NO_GRAD) and self.coverage.no_grad_streak(o):
                return False
        updated = self.on(checkids.PARAM_NOT_UPDATED) or self.on(checkids.FROZEN_PARAM_CHANGED)
        return not (updated and self.coverage.not_updated_streak(o))

    def take_rows(
        self, w: WatchedOptimizer, win: Window, start: int, end: int, values_done: bool
    ) -> int:
        """Check rows ``start:end`` (quiet, histories idle) at once; returns how many were
        taken — fewer when the gradient history flags a row, which then takes the
        reference path."""
        o = w.index
        stop = end
        if not values_done and self.on(checkids.EXPLODING_GRAD):
            stop = start + self.numerics.exploding_rows(o, win, start, end)
            if stop == start:
                return 0
        if any(self.on(c) for c in LR_CHECKS):
            self.lr.observe_rows(o, win.steps[start:stop], win.lr[start:stop])
        if not values_done:  # what the reference does on a row with nothing to report
            if self.on(checkids.NONFINITE_LOSS):
                self.sink.clear(checkids.NONFINITE_LOSS, None, o)
            for check in (checkids.NONFINITE_GRAD, checkids.EXPLODING_GRAD, checkids.PARAM_NO_GRAD):
                if self.on(check):
                    self.sink.settle(check, o, set())
            if self.on(checkids.PARAM_NO_GRAD):
                self.coverage.all_had_grad(o)
        if self.on(checkids.PARAM_NOT_UPDATED):  # every tensor moved on these rows
            self.coverage.moved(o, win.update_norm[stop - 1], win.lr[stop - 1])
        if self.on(checkids.UPDATE_RATIO):
            self.numerics.update_ratio_rows(o, win, start, stop, w.names, w.group_of)
        if self.on(checkids.LOSS_DIVERGING) or self.on(checkids.LOSS_PLATEAU):
            moved = loss_checks.motion_rows(win, start, stop)
            for r in range(start, stop):
                self.losses.observe_loss(o, win.steps[r], win.loss[r], moved[r - start])
        self.sink.flush()
        return stop - start

    def window(
        self,
        w: WatchedOptimizer,
        win: Window,
        checksums: list[list[float]],
        taken: list[bool],
        inputs: list[list[list[float]] | None] | None = None,
        clocks: list[int] | None = None,
    ) -> None:
        """``repeated-batch`` and ``loss-at-chance`` on a window of collected rows (each
        row's batch checksum, whether one was taken, each forward's apart when a step had
        several, and the run's step counter at each)."""
        if self.on(checkids.REPEATED_BATCH):
            self.repeats.observe_rows(w.index, win.steps, checksums, taken, inputs, clocks)
        if self.on(checkids.LOSS_AT_CHANCE):
            updated: list[bool] = (win.update_norm != 0).any(dim=1).tolist()
            self.chance.observe_rows(w.index, win.steps, win.loss, updated)

    def loss_shape(self, step: int, fn: str, a: torch.Size, b: torch.Size, out: torch.Size) -> None:
        """``loss-shape-mismatch`` (called from the loss function wrapper)."""
        if not self.on(checkids.LOSS_SHAPE_MISMATCH):
            return
        action = self.sink.report(
            finding(
                checkids.LOSS_SHAPE_MISMATCH,
                step,
                f"{fn} got input {list(a)} and target {list(b)}, which broadcast to {list(out)}: "
                "the loss compares every prediction with every target.",
                "make the shapes equal, e.g. pred.squeeze(-1) or target.unsqueeze(-1).",
                details={
                    "function": fn,
                    "input_shape": list(a),
                    "target_shape": list(b),
                    "broadcast_shape": list(out),
                },
            )
        )
        self.shape_skip = self.shape_skip or action == "skip"
        self.sink.flush()

    def close(self, views: list[StepView]) -> None:
        """End of run: frozen tensors that never trained become warnings."""
        if self.on(checkids.FROZEN_PARAM_IN_OPTIMIZER):
            for v in views:
                self.coverage.frozen(v, final=True)
        self.sink.flush()
