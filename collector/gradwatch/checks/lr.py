"""Learning-rate checks: ``lr-jump``, ``lr-collapse`` and ``lr-too-large``
(:mod:`~gradwatch.checks.lrscale`), per optimizer and param group.

* ``lr-jump``: at one step a group's learning rate rises above ``JUMP_FACTOR`` times the
  largest value it had before (0.01 -> 10,000), after ``JUMP_MIN_STEPS`` steps with it.
  Warm-up, OneCycle and warm restarts rise by small factors per step and never pass their
  own earlier peak by that much.
* ``lr-collapse``: a group's learning rate has been below ``COLLAPSE_FACTOR`` times its
  peak for ``COLLAPSE_MIN_STEPS`` steps and for a ``COLLAPSE_SHARE`` of the steps before
  it fell there — a scheduler sized in epochs stepped every batch. Decay schedules over
  the run reach such a level only in their last percent of steps, or never. When the
  collapse shows its effect earlier — tensors of the group stop changing at all
  (``param-not-updated`` is about to report them) — it is reported at that step, so the
  incident leads with the learning rate and the stuck tensors are its consequence.

Both read only the host-side learning rates of each collected row; a window of rows in
which no group rises or falls to these levels costs a few tensor ops.
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from gradwatch.checks import lrscale
from gradwatch.checks.findings import Finding, FindingSink, finding
from gradwatch.checks.fmt import counted, num, times
from gradwatch.core import checkids

if TYPE_CHECKING:
    from gradwatch.checks.numstate import FirstUpdate
    from gradwatch.checks.view import StepView, WatchedOptimizer

JUMP_FACTOR = 10.0
#: a first update at least as large as the weights it changed (update-ratio's own level for
#: an update that rewrites the weights instead of training them), then a diverging loss...
FIRST_UPDATE_RATIO = 1.0
#: ...made by a step this many times the gradient: the rate amplified an ordinary gradient
FIRST_UPDATE_MULTIPLIER = 10.0
#: rows with a positive LR before a rise counts as a jump: a ramp from a tiny base
#: (CyclicLR, LinearLR from 1e-3) multiplies it many times over in its first step or two
JUMP_MIN_STEPS = 5
COLLAPSE_FACTOR = 1e-5
COLLAPSE_MIN_STEPS = 50
COLLAPSE_SHARE = 0.25
#: stuck tensors confirm a collapse early once it has held this share of the steps before
#: it (and EARLY_MIN_STEPS): a schedule sized to the run is at its floor for less
EARLY_SHARE = 0.05
EARLY_MIN_STEPS = 3


@dataclass
class _Groups:
    """The learning-rate history of one optimizer's param groups."""

    peak: list[float]  # largest finite LR so far (0 before any)
    seen: list[int]  # rows with a finite positive LR so far
    low_since: list[int | None] = field(default_factory=list)  # step it fell below the level
    first_step: int = 0
    collapsed: bool = False  # a collapse finding is active


class LrChecks:
    """``lr-jump`` and ``lr-collapse`` of one run."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self._groups: dict[int, _Groups] = {}
        self._jumped: set[int] = set()  # optimizers whose previous row reported a jump
        self.watches: Sequence[WatchedOptimizer] = ()  # set at start: names the scheduler
        self._scheduler: dict[int, str | None] = {}
        self._limits: dict[int, lrscale.Limits] = {}  # lr-too-large, per optimizer
        #: lr-too-large found, per optimizer (escalated to an error once the loss diverges)
        self._flagged: dict[int, Finding] = {}
        #: an optimizer's first update at its largest against the weights it changed (set
        #: by the check engine: the numerics checks measure it)
        self.first_update: Callable[[int], FirstUpdate | None] | None = None
        self._first_told: set[int] = set()

    def arm(self, w: WatchedOptimizer, step: int, lr: list[float]) -> None:
        """``lr-too-large`` at optimizer ``w``'s first step, before its update: measure the
        size of each group's weights (optimizers whose step is about the learning rate
        only), and check the rate now and the peak its scheduler was built for."""
        if w.index in self._limits:
            return
        groups = w.optimizer.param_groups
        name = lrscale.scale_free(w.optimizer)
        unit = lrscale.multiplier(w.optimizer)
        if name is not None:
            size, count = lrscale.weight_sizes(w.params, w.group_of, len(groups))
        elif unit is not None:  # its rate is compared with its natural 1
            name, size, count = unit, [1.0] * len(groups), [0] * len(groups)
        else:
            return
        if all(s is None for s in size):
            return
        limits = self._limits[w.index] = lrscale.Limits(name, size, count, unit=unit is not None)
        if self._scale(w.index, [step], [lr]):
            return
        peak = [
            max(x, p) if math.isfinite(x) else p
            for x, p in zip(lr, lrscale.planned_peak(groups), strict=False)
        ]
        groups_over = lrscale.over(limits, peak)
        if groups_over:
            self._too_large(w.index, step, peak, groups_over, planned=True)

    def _scale(self, o: int, steps: list[int], lrs: list[list[float]]) -> bool:
        """``lr-too-large`` over rows of optimizer ``o`` (nothing once it was found, or for an
        optimizer that is not judged); whether it was found."""
        limits = self._limits.get(o)
        if limits is None or limits.done:
            return False
        for step, lr in zip(steps, lrs, strict=True):
            groups = lrscale.over(limits, lr)
            if groups:
                self._too_large(o, step, lr, groups, planned=False)
                return True
        return False

    def _too_large(
        self, o: int, step: int, lr: list[float], groups: list[int], *, planned: bool
    ) -> None:
        limits = self._limits[o]
        limits.done = True  # one finding per optimizer: the rate is a setting, not an episode
        scheduler = self.scheduler(o)
        found = lrscale.report(o, step, limits, lr, groups, scheduler, planned)
        self._flagged[o] = found
        self._first_told.add(o)  # named by its rate already: the first update adds nothing
        self.sink.report(found)

    def diverged(self, o: int, step: int, how: str) -> None:
        """The loss of optimizer ``o`` diverged (``how``, in words) after ``lr-too-large``
        named its rate: that is the evidence the rate breaks training, so the finding is
        raised to an error, once (``--fail-on error`` then fails the run)."""
        found = self._flagged.pop(o, None)
        if found is None:
            self._first_update_too_large(o, step, how)
            return
        if step < (found.step or 0):
            return
        # at the rate's own step: the same incident, whose cause the rate stays
        self.sink.report(
            dataclasses.replace(
                found,
                severity="error",
                message=f"{how} at step {step}, after the learning rate was found too large "
                f"at step {found.step}: {found.message[0].lower()}{found.message[1:]}",
                details={**found.details, "diverged_at_step": step, "diverged": how},
            )
        )

    def _first_update_too_large(self, o: int, step: int, how: str) -> None:
        """The loss of optimizer ``o`` diverged, and its very first update was
        at least as large as the weights it changed (``FIRST_UPDATE_RATIO``: the level at
        which ``update-ratio`` calls an update a rewrite) *and* ``FIRST_UPDATE_MULTIPLIER``
        times the gradient that made it or more: the rate multiplied an ordinary gradient
        into a step that rewrote the weights (a huge first gradient, as an AMP loss scale
        applied to an unscaled step makes, is not the rate's doing; an optimizer that
        ``lr-too-large`` does not judge by the rate alone: SGD, whose step a clipped
        gradient bounds, DP-SGD). Once per optimizer."""
        first = self.first_update(o) if self.first_update is not None else None
        if first is None or o in self._first_told:
            return
        ratio, name, multiplier, lr = first
        if ratio < FIRST_UPDATE_RATIO or multiplier is None or multiplier < FIRST_UPDATE_MULTIPLIER:
            return  # a small step, or a huge gradient (an unscaled AMP loss), not the rate
        self._first_told.add(o)
        rate = f" ({num(lr)})" if math.isfinite(lr) else ""
        self.sink.report(
            finding(
                checkids.LR_TOO_LARGE,
                step,
                f"the learning rate{rate} is far too large for these weights: its first "
                f"update was {times(ratio)} the weights it changed ({name}) and "
                f"{times(multiplier)} the gradient that made it, and {how} at step {step}.",
                "lower the learning rate (by about that factor) or add warm-up.",
                severity="error",
                param=name,
                optimizer=o,
                details={
                    "first_update_ratio": ratio,
                    "step_multiplier": multiplier,
                    "diverged_at_step": step,
                    "diverged": how,
                },
            )
        )

    def _of(self, o: int, step: int, lr: list[float]) -> _Groups:
        state = self._groups.get(o)
        if state is None or len(state.peak) != len(lr):  # groups added: start again
            state = self._groups[o] = _Groups(
                peak=[0.0] * len(lr),
                seen=[0] * len(lr),
                low_since=[None] * len(lr),
                first_step=step,
            )
        return state

    def observe(self, o: int, step: int, lr: list[float]) -> None:
        """One collected row: optimizer ``o``'s learning rates at step ``step`` (the
        reference that :meth:`observe_rows` must agree with)."""
        self._scale(o, [step], [lr])
        state = self._of(o, step, lr)
        jumps = [
            (g, state.peak[g], x)
            for g, x in enumerate(lr)
            if state.seen[g] >= JUMP_MIN_STEPS
            and math.isfinite(x)
            and x > JUMP_FACTOR * state.peak[g]
        ]
        if jumps:
            self._report_jump(o, step, jumps)
        elif o in self._jumped:
            self._jumped.discard(o)
            self.sink.clear(checkids.LR_JUMP, None, o)
        for g, x in enumerate(lr):
            if math.isfinite(x) and x > 0:
                state.peak[g] = max(state.peak[g], x)
                state.seen[g] += 1
        self._collapse(o, step, lr, state)

    def observe_rows(self, o: int, steps: list[int], lrs: list[list[float]]) -> None:
        """Rows of one window at once: in the common case (no group jumps, none is at the
        collapse level, none was) only the peaks move; any other window goes row by row."""
        if not steps:
            return
        if o in self._limits and self._scale(o, steps, lrs):
            self._each(o, steps, lrs)  # the row path reports what else holds at those rows
            return
        state = self._of(o, steps[0], lrs[0])
        first = lrs[0]
        if all(r == first for r in lrs) and self._steady(o, state, first, len(lrs)):
            return  # a constant LR over the window: no tensor op at all
        lr = torch.tensor(lrs, dtype=torch.float64)
        if lr.shape[1] != len(state.peak) or o in self._jumped or any(state.low_since):
            self._each(o, steps, lrs)
            return
        rates = torch.where(torch.isfinite(lr), lr, 0.0)
        peak = torch.tensor(state.peak, dtype=torch.float64)
        after = torch.maximum(rates.cummax(dim=0).values, peak)  # the peak after each row
        before = torch.cat([peak.unsqueeze(0), after[:-1]])
        positive = (rates > 0).long()
        count = torch.tensor(state.seen) + positive.cumsum(dim=0) - positive  # rows before
        jump = (count >= JUMP_MIN_STEPS) & (rates > JUMP_FACTOR * before)
        low = (after > 0) & torch.isfinite(lr) & (lr < COLLAPSE_FACTOR * after)
        if bool((jump | low).any()):
            self._each(o, steps, lrs)
            return
        state.peak = after[-1].tolist()
        state.seen = (torch.tensor(state.seen) + positive.sum(dim=0)).tolist()

    def _steady(self, o: int, state: _Groups, lr: list[float], rows: int) -> bool:
        """``rows`` rows of the same ``lr``: when its first row neither jumps nor is at the
        collapse level (then no later one is), move the peaks as those rows would and say
        so; otherwise leave everything to the other paths."""
        if len(lr) != len(state.peak) or o in self._jumped or any(state.low_since):
            return False
        for g, x in enumerate(lr):
            if not math.isfinite(x) or x <= 0:
                continue
            if state.seen[g] >= JUMP_MIN_STEPS and x > JUMP_FACTOR * state.peak[g]:
                return False
            if x < COLLAPSE_FACTOR * max(state.peak[g], x):
                return False
        for g, x in enumerate(lr):
            if math.isfinite(x) and x > 0:
                state.peak[g] = max(state.peak[g], x)
                state.seen[g] += rows
        return True

    def _each(self, o: int, steps: list[int], lrs: list[list[float]]) -> None:
        for step, lr in zip(steps, lrs, strict=True):
            self.observe(o, step, lr)

    def _report_jump(self, o: int, step: int, jumps: list[tuple[int, float, float]]) -> None:
        self._jumped.add(o)
        g, before, after = jumps[0]
        what = ", ".join(f"group {j} from {num(a)} to {num(b)}" for j, a, b in jumps)
        scheduler = self.scheduler(o)
        by = f" (scheduler: {scheduler})" if scheduler else ""
        self.sink.report(
            finding(
                checkids.LR_JUMP,
                step,
                f"the learning rate jumped at this step: {what}{by}, "
                f"{times(after / before)} its largest value before.",
                "check the code that sets param_group['lr'] and the scheduler (a factor applied "
                "twice, a wrong unit, a schedule read past its end).",
                optimizer=o,
                details={
                    "group": g,
                    "before": before,
                    "after": after,
                    "groups": {str(j): [a, b] for j, a, b in jumps},
                    "scheduler": scheduler,
                },
            )
        )

    def _collapse(self, o: int, step: int, lr: list[float], state: _Groups) -> None:
        low = [
            state.peak[g] > 0 and math.isfinite(x) and x < COLLAPSE_FACTOR * state.peak[g]
            for g, x in enumerate(lr)
        ]
        state.low_since = [
            (since if since is not None else step) if is_low else None
            for since, is_low in zip(state.low_since, low, strict=True)
        ]
        held = [
            g
            for g, since in enumerate(state.low_since)
            if since is not None
            and step - since + 1
            >= max(COLLAPSE_MIN_STEPS, COLLAPSE_SHARE * (since - state.first_step))
        ]
        if not held:
            if state.collapsed and not any(low):
                state.collapsed = False
                self.sink.clear(checkids.LR_COLLAPSE, None, o)
            return
        if not state.collapsed:
            self._report_collapse(o, step, lr, state, held, None)

    def stalled(self, v: StepView, stuck: list[int]) -> bool:
        """Tensors of optimizer ``v.optimizer`` have stopped moving (``param-not-updated``
        is about to report them). When the learning rate of their group is at the collapse
        level and has been there for ``EARLY_SHARE`` of the steps before it fell, that is
        the collapse, confirmed by its effect before ``COLLAPSE_MIN_STEPS`` have passed —
        reported now, so the stuck tensors read as its consequence. When it has been there
        for less (a schedule that reaches its floor on the last steps of the run, as
        OneCycleLR and cosine schedules sized to the run do), the low rate explains the
        stuck tensors and it is not (yet) a collapse: returns True, and
        ``param-not-updated`` stays quiet."""
        state = self._groups.get(v.optimizer)
        if state is None or state.collapsed or not v.group_of:
            return False
        groups = sorted({v.group_of[i] for i in stuck})
        held = [g for g in groups if g < len(state.low_since) and state.low_since[g] is not None]
        if not held:
            return False
        since = min(s for g in held if (s := state.low_since[g]) is not None)
        if v.step - since + 1 < max(EARLY_MIN_STEPS, EARLY_SHARE * (since - state.first_step)):
            return True
        self._report_collapse(v.optimizer, v.step, v.lr, state, held, len(stuck))
        return False

    def _report_collapse(
        self, o: int, step: int, lr: list[float], state: _Groups, held: list[int], stuck: int | None
    ) -> None:
        state.collapsed = True
        g = held[0]
        since = state.low_since[g]
        assert since is not None
        scheduler = self.scheduler(o)
        by = f" under {scheduler}" if scheduler else ""
        effect = (
            "the parameters have all but stopped moving"
            if stuck is None
            else f"{counted(stuck, 'parameter tensor')} of the group no longer "
            + ("changes" if stuck == 1 else "change")
            + " at all"
        )
        self.sink.report(
            finding(
                checkids.LR_COLLAPSE,
                step,
                f"the learning rate of group {g} collapsed{by} to {num(lr[g])}"
                + (
                    f", {times(lr[g] / state.peak[g])} its peak of {num(state.peak[g])},"
                    if lr[g] > 0
                    else f" from its peak of {num(state.peak[g])}"
                )
                + f" at step {since} and has stayed there for {step - since + 1} steps: "
                f"{effect}.",
                "a scheduler sized in epochs is probably stepped every batch: call "
                "scheduler.step() once per epoch, or give it the number of batches."
                if scheduler
                else "check the code that sets param_group['lr'] (a factor applied every "
                "step, a schedule read past its end).",
                optimizer=o,
                details=lrscale.group_details(
                    g,
                    held,
                    lr,
                    scheduler,
                    peak=state.peak[g],
                    since_step=since,
                    stuck_tensors=stuck,
                ),
            )
        )

    def scheduler(self, o: int) -> str | None:
        """The class name of the LR scheduler attached to optimizer ``o`` (found once, from
        the objects that refer to the optimizer; only when a finding names it)."""
        if o not in self._scheduler:
            optimizer = self.watches[o].optimizer if o < len(self.watches) else None
            self._scheduler[o] = None if optimizer is None else _scheduler_of(optimizer)
        return self._scheduler[o]


def _needed(before: int) -> float:
    """Steps a collapsed LR must hold, after ``before`` steps at a higher level."""
    return max(COLLAPSE_MIN_STEPS, COLLAPSE_SHARE * before)


def _scheduler_of(optimizer: object) -> str | None:
    """A scheduler object whose ``optimizer`` is ``optimizer`` (torch's or another
    library's: anything with ``step`` and a ``get_last_lr``/``_last_lr`` or a name ending
    in ``LR``/``Scheduler``/``OnPlateau``)."""
    for ref in gc.get_referrers(optimizer):
        owners = gc.get_referrers(ref) if isinstance(ref, dict) else [ref]
        for owner in owners:
            if getattr(owner, "optimizer", None) is not optimizer or owner is optimizer:
                continue
            name = type(owner).__name__
            if hasattr(owner, "get_last_lr") or name.endswith(("LR", "Scheduler", "OnPlateau")):
                return name
    return None
