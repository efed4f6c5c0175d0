"""Numerics checks: ``nonfinite-loss``, ``nonfinite-grad``, ``nonfinite-param``,
``exploding-grad`` (:mod:`~gradwatch.checks.explode`), ``vanishing-grad``,
``update-ratio`` (:mod:`~gradwatch.checks.ratio`).

Vectorised over tensors with a handful of small host ops per step; per-tensor Python work
happens only for tensors that are (or just stopped being) in a bad state.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import torch

from gradwatch.checks import explode
from gradwatch.checks import ratio as ratio_mod
from gradwatch.checks.findings import Action, Finding, FindingSink, finding
from gradwatch.checks.fmt import counted, num
from gradwatch.checks.numstate import FirstUpdate, State, ends
from gradwatch.checks.view import StepView, Window, held_for
from gradwatch.core import checkids

RMS_VANISH = 1e-7
STRUCTURAL_ZERO = 1e-4  # RMS below this fraction of the largest one: zero up to rounding
#: a loss at most this fraction of the run's first one is a fit gone near zero (a memorised
#: batch, a converged model): every gradient is small with it, which is not ``vanishing-grad``
CONVERGED = 1e-3
FIRST_LAST_RATIO = 1e-3
#: a tensor whose update is below this share of its norm stands still: at that pace it takes
#: a million steps to move by its own size (training moves weights by ~1e-4-1e-2 per step)
STILL = 1e-6
#: steps the condition must hold: as long as update-ratio's warning, so a start-of-training
#: transient (a GAN generator before its discriminator has learnt anything) settles first
VANISH_STEPS = 20
LISTED = 4

#: ``(check, view, tensor index, ‖θ‖ before the step) -> details.origin`` (set by the run)
OriginOf = Callable[[str, StepView, "int | None", "float | None"], "dict[str, Any] | None"]


class NumericsChecks:
    """Numerics checks of one run, with per-optimizer histories."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self._state: dict[int, State] = {}
        self._lock = threading.Lock()  # value checks may run live, update checks on I/O
        self._deep: set[int] = set()  # optimizers whose first/last ratio is low right now
        self.origin: OriginOf | None = None  # NaN provenance (gradwatch.nan.origin)
        #: ``(optimizer, step) ->`` what is known of an outlier input batch at that step
        #: (:meth:`gradwatch.checks.batchscale.BatchScales.outlier`; set by the engine)
        self.outlier: Callable[[int, int], object] | None = None
        #: ‖θ‖ before each optimizer's first update (set by its checker at step 1)
        self.initial: dict[int, torch.Tensor] = {}

    def _with_origin(
        self,
        check: str,
        v: StepView,
        message: str,
        details: dict[str, Any],
        tensor: int | None = None,
        before: float | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """Add where the first non-finite value came from, when it is known."""
        origin = None if self.origin is None else self.origin(check, v, tensor, before)
        if not origin:
            return message, details
        return f"{message} {origin.get('summary', '')}".strip(), {**details, "origin": origin}

    def _of(self, v: StepView) -> State:
        state = self._state.get(v.optimizer)
        if state is None:  # created once; later reads need no lock
            with self._lock:
                state = self._state.get(v.optimizer)
                if state is None:
                    state = self._state[v.optimizer] = State.of(v)
        return state

    def loss(self, v: StepView) -> Action:
        """``nonfinite-loss``."""
        if v.loss is not None and not math.isfinite(v.loss):
            message, details = self._with_origin(
                checkids.NONFINITE_LOSS, v, f"the loss is {v.loss}.", {"loss": v.loss}
            )
            return self.sink.report(
                finding(
                    checkids.NONFINITE_LOSS,
                    v.step,
                    message,
                    "look for log(0), division by ~0, an exploding learning rate or bad inputs; "
                    "watch(checks={'nonfinite-loss': 'raise'}) stops at the first one.",
                    optimizer=v.optimizer,
                    details=details,
                )
            )
        self.sink.clear(checkids.NONFINITE_LOSS, None, v.optimizer)
        return "none"

    def grads(self, v: StepView) -> list[Action]:
        """``nonfinite-grad`` and ``exploding-grad`` (``vanishing-grad``, whose evidence
        is the update, runs after it: :meth:`vanishing`)."""
        assert v.grad_norm is not None and v.nonfinite is not None
        actions: list[Action] = []
        if self.sink.enabled(checkids.NONFINITE_GRAD):
            actions += self._nonfinite(v)
        state = self._of(v)
        _note_loss(state, v.loss)
        if self.sink.enabled(checkids.EXPLODING_GRAD):
            actions += self._exploding(v, state)
        return actions

    def _nonfinite(self, v: StepView) -> list[Action]:
        assert v.nonfinite is not None
        if not bool((v.nonfinite > 0).any()):
            self.sink.settle(checkids.NONFINITE_GRAD, v.optimizer, set())
            return []
        bad = [i for i in v.order if v.nonfinite[i] > 0]  # first in forward order
        counts = {v.names[i]: int(v.nonfinite[i]) for i in bad}
        key = self.sink.episode(checkids.NONFINITE_GRAD, v.optimizer, [v.names[bad[0]]])
        message, details = self._with_origin(
            checkids.NONFINITE_GRAD,
            v,
            f"{sum(counts.values())} gradient elements are NaN/Inf; the first layer (in "
            f"forward order) where they appear is this one "
            f"({counted(len(bad), 'tensor')} affected).",
            {"counts": counts, "numel": {v.names[i]: v.numel[i] for i in bad}},
        )
        return [
            self.sink.report(
                finding(
                    checkids.NONFINITE_GRAD,
                    v.step,
                    message,
                    "find the operation that produced it (details.origin; "
                    "torch.autograd.detect_anomaly pinpoints it too), lower the learning rate or "
                    "clip gradients; with fp16 use a GradScaler.",
                    param=key,
                    optimizer=v.optimizer,
                    details=details,
                )
            )
        ]

    def _exploding(self, v: StepView, state: State) -> list[Action]:
        """One step of :mod:`~gradwatch.checks.explode` (the reference path)."""
        assert v.grad_norm is not None
        total = explode.totals(v.grad_norm.unsqueeze(0))
        self._floor(v.optimizer, state)
        reason = explode.flag(state, total)
        move = _move(v)
        jump = reason is not None and reason[0] in explode.JUMPS
        if jump and not explode.large_update(state, move) and not self._outlier_batch(v):
            reason = None  # a jump with no evidence of harm: the update stayed near usual
        if reason is None and float(total[0]) == math.inf and not _any_nonfinite(v):
            reason = ("overflow", math.inf)  # finite elements whose norm overflows: huge
        explode.observe(state, v.grad_norm, total, move)
        value = float(total[0])
        if reason is not None:
            state.calm = 0
            return [explode.report(self.sink, v, state, reason, value)]
        if state.exploding is not None:
            state.calm = state.calm + 1 if explode.calm(state, value) else 0
            if state.calm >= explode.CALM_STEPS:
                self.sink.clear(checkids.EXPLODING_GRAD, state.exploding, v.optimizer)
                state.exploding, state.calm = None, 0
        return []

    def vanishing(self, v: StepView) -> None:
        """``vanishing-grad`` on one step, after its update (the update is its evidence)."""
        assert v.grad_norm is not None
        state = self._of(v)
        _note_loss(state, v.loss)
        self._vanishing(v, state, v.grad_norm / state.sqrt_numel)

    def _outlier_batch(self, v: StepView) -> bool:
        """Whether the step's input batch is on another scale (an outlier): a jump it
        causes is a data bug whatever the optimizer makes of it (Adam shrinks its update,
        but its second moment then holds the spike and stalls later steps)."""
        return self.outlier is not None and self.outlier(v.optimizer, v.step) is not None

    def _vanishing(self, v: StepView, state: State, rms: torch.Tensor) -> None:
        """Tensors whose gradient is vanishing (:func:`_tiny`, or the first weight matrix's
        norm below ``FIRST_LAST_RATIO`` of the last one's) *and* whose weights stand still
        (:func:`_still`: a slow layer that still moves is training) for ``VANISH_STEPS``
        steps: one finding per episode, listing them."""
        assert v.grad_norm is not None
        small = rms < RMS_VANISH
        idle = state.vanish is None and state.vanishing is None and v.optimizer not in self._deep
        low = self._first_last_ratio(v, state)
        if idle and not bool(small.any()) and low is None:
            return  # the common case: nothing small, no streak, no deep-net ratio
        finite = torch.isfinite(rms)
        top = float(rms[finite].max()) if bool(finite.any()) else 0.0
        tiny = _tiny(v.grad_norm, rms, top, _converged(state, v.loss)) & v.has_grad_t
        tiny &= _still(v.update_norm, v.param_norm)
        if low is not None:
            tiny[low[0]] = True
        state.vanish = held_for(state.vanish, tiny)
        if not bool(state.vanish.any()):
            state.vanish = None
        held = [i for i in v.order if state.vanish is not None and state.vanish[i] >= VANISH_STEPS]
        if held and state.vanishing is None:
            state.vanishing = v.names[held[0]]
            self.sink.report(self._vanish_finding(v, held, rms, low))
        elif state.vanishing is not None:
            state.vanish_calm = 0 if bool(tiny.any()) else state.vanish_calm + 1
            if state.vanish_calm >= VANISH_STEPS:
                self.sink.clear(checkids.VANISHING_GRAD, state.vanishing, v.optimizer)
                state.vanishing, state.vanish_calm = None, 0

    def _vanish_finding(
        self, v: StepView, held: list[int], rms: torch.Tensor, low: tuple[int, float] | None
    ) -> Finding:
        moved = _moved(v.update_norm, v.param_norm, len(v.names))
        listed = ", ".join(
            f"{v.names[i]} (RMS {num(float(rms[i]))}, update {num(float(moved[i]))} of its norm)"
            for i in held[:LISTED]
        )
        more = f" and {len(held) - LISTED} more" if len(held) > LISTED else ""
        deep = (
            f"; the first layer's gradient is {num(low[1])} of the last layer's"
            if low is not None and low[0] in held
            else ""
        )
        return finding(
            checkids.VANISHING_GRAD,
            v.step,
            f"the gradient is vanishing and the weights stand still in "
            f"{counted(len(held), 'tensor')} for {VANISH_STEPS} steps: "
            f"{listed}{more}{deep}.",
            "check the initialisation, activations (saturating sigmoid/tanh), the loss's scale "
            "and normalisation between these layers and the loss; an adaptive optimizer "
            "(Adam) rescales small gradients.",
            param=v.names[held[0]],
            optimizer=v.optimizer,
            details={
                "rms": {v.names[i]: float(rms[i]) for i in held},
                "update_ratio": {v.names[i]: float(moved[i]) for i in held},
            },
        )

    def _first_last_ratio(self, v: StepView, state: State) -> tuple[int, float] | None:
        """(first weight matrix, its gradient norm / the last one's) when below
        ``FIRST_LAST_RATIO`` and its weights also stand still (:func:`_still`): a deep net
        whose first layers do not train."""
        assert v.grad_norm is not None
        first, last = ends(state, v.order)
        if first < 0 or not (v.has_grad[first] and v.has_grad[last]):
            return None
        top = float(v.grad_norm[last])
        low = float(v.grad_norm[first]) / top if top > 0 else 0.0
        still = _still(v.update_norm, v.param_norm)
        if 0 < low < FIRST_LAST_RATIO and bool(still if isinstance(still, bool) else still[first]):
            self._deep.add(v.optimizer)
            return first, low
        self._deep.discard(v.optimizer)
        return None

    # -- a window of rows at once (gradwatch.hooks.stepcheck) ----------------------------------
    # The per-row methods above are the reference. For rows on which they would report
    # nothing and only update their history, these do the same for many rows in a few ops.

    def has_history(self, optimizer: int) -> bool:
        """Whether ``optimizer``'s histories exist (its first checked row creates them)."""
        return optimizer in self._state

    def rows_idle(self, optimizer: int, vanishing: bool, exploding: bool = True) -> bool:
        """Whether no per-row history of ``optimizer`` is in a state the window methods do
        not follow (an open episode, a vanishing streak, a deep-net ratio)."""
        state = self._state.get(optimizer)
        if state is None:
            return False  # the first row creates it
        if exploding and state.exploding is not None:
            return False
        busy = state.vanish is not None or state.vanishing is not None
        return not (vanishing and (busy or optimizer in self._deep))

    def quiet_rows(
        self, optimizer: int, win: Window, order: list[int], exploding: bool, vanishing: bool
    ) -> torch.Tensor | None:
        """Per row: whether :meth:`grads` would find nothing and leave no streak, assuming
        the history is idle (``None`` before the history exists). What depends on the
        gradient history (growth streaks, the rolling median) :meth:`exploding_rows` checks."""
        state = self._state.get(optimizer)
        if state is None:
            return None
        g = win.grad_norm
        quiet = torch.isfinite(g).all(dim=1)
        if vanishing:  # as _vanishing: small, not zero up to rounding, and standing still
            rms = g / state.sqrt_numel
            if state.first_loss is None:
                for x in win.loss:
                    _note_loss(state, x)
            fit = torch.tensor([_converged(state, x) for x in win.loss]).unsqueeze(1)
            tiny = _tiny(g, rms, rms.max(dim=1, keepdim=True).values, fit)
            quiet &= ~(tiny & _still(win.update_norm, win.param_norm)).any(dim=1)
            first, last = ends(state, order)
            if first >= 0:
                top = g[:, last]
                low = torch.where(top > 0, g[:, first] / top, 0.0)
                still = _still(win.update_norm, win.param_norm)
                lag = still if isinstance(still, bool) else still[:, first]
                quiet &= ~((low > 0) & (low < FIRST_LAST_RATIO) & lag)
        return quiet

    def exploding_rows(self, optimizer: int, win: Window, start: int, end: int) -> int:
        """``exploding-grad`` over rows ``start:end`` that :meth:`quiet_rows` passed: adds
        them to the history, up to the first row that it flags; returns how many rows
        were taken."""
        state = self._state[optimizer]
        self._floor(optimizer, state)
        moved = explode.moves(win.update_norm[start:end], win.param_norm[start:end])
        return explode.take_rows(state, win.grad_norm[start:end], moved)

    def _floor(self, optimizer: int, state: State) -> None:
        """Read exploding-grad's floor once, from ‖θ‖ before the first update."""
        if state.floor is None:
            state.floor = explode.floor_of(self.initial.get(optimizer))

    def set_initial(self, optimizer: int, param_norm: torch.Tensor) -> None:
        """‖θ‖ of ``optimizer``'s tensors before its first update (any device)."""
        self.initial[optimizer] = param_norm

    def _before(self, optimizer: int, state: State, update: torch.Tensor) -> torch.Tensor:
        """‖θ‖ before the first update of a window: the previous step's, or the one
        measured before the first update (zeros, which no check reads, when neither)."""
        before = state.previous_param_norm
        if before is None or before.shape != update.shape[-1:]:
            first = self.initial.pop(optimizer, None)
            before = None if first is None else first.to("cpu", torch.float64)
        if before is None or before.shape != update.shape[-1:]:
            before = torch.zeros(update.shape[-1], dtype=torch.float64)
        return before

    def update_ratio_rows(
        self,
        optimizer: int,
        win: Window,
        start: int,
        end: int,
        names: list[str],
        group_of: list[int],
    ) -> None:
        """:meth:`update_ratio` over rows ``start:end`` (every tensor with a gradient)."""
        state = self._state[optimizer]
        param, update = win.param_norm[start:end], win.update_norm[start:end]
        first = self._before(optimizer, state, update)
        before = torch.cat([first.unsqueeze(0), param[:-1]])
        state.previous_param_norm = param[-1]
        ratio = ratio_mod.ratios(update, before)
        seen = state.ratio_rows
        state.ratio_rows += end - start
        if seen == 0:
            state.first_update = ratio_mod.largest(
                state, ratio[0], before[0], update[0], win.grad_norm[start],
                (names, group_of, win.lr[start]),
            )  # fmt: skip
        if not ratio_mod.busy(state, ratio, before):
            return  # the common case: every weight matrix moves at a healthy rate
        for r in range(end - start):
            where = (optimizer, win.steps[start + r])
            facts = (names, group_of, win.lr[start + r], None)
            ratio_mod.row(self.sink, state, where, ratio[r], before[r], facts, seen + r + 1)

    def first_update(self, optimizer: int) -> FirstUpdate | None:
        """``optimizer``'s first measured update at its largest against the weights it
        changed (None: not measured)."""
        state = self._state.get(optimizer)
        return None if state is None else state.first_update

    def params(self, v: StepView) -> None:
        """``nonfinite-param`` after the update."""
        assert v.param_norm is not None
        if bool(torch.isfinite(v.param_norm).all()):
            return
        bad = [i for i in v.order if not math.isfinite(float(v.param_norm[i]))]
        message = f"after this step {len(bad)} parameter tensors hold NaN/Inf, first this one."
        details: dict[str, Any] = {"tensors": [v.names[i] for i in bad]}
        if not self.sink.active(checkids.NONFINITE_PARAM, v.optimizer):  # origin at the onset only
            state = self._state.get(v.optimizer)
            norms = None if state is None else state.previous_param_norm
            before = None if norms is None or len(norms) <= bad[0] else float(norms[bad[0]])
            message, details = self._with_origin(
                checkids.NONFINITE_PARAM, v, message, details, bad[0], before
            )
        key = self.sink.episode(checkids.NONFINITE_PARAM, v.optimizer, [v.names[bad[0]]])
        self.sink.report(
            finding(
                checkids.NONFINITE_PARAM,
                v.step,
                message,
                "stop here: the run cannot recover; find the first non-finite gradient or loss "
                "(watch(checks={'nonfinite-grad': 'skip'}) drops such updates).",
                param=key,
                optimizer=v.optimizer,
                details=details,
            )
        )

    def update_ratio(self, v: StepView) -> None:
        """``update-ratio``: ‖Δθ‖/‖θ_before‖ of weight matrices far too large
        (:mod:`~gradwatch.checks.ratio`)."""
        assert v.param_norm is not None and v.update_norm is not None
        state = self._of(v)
        before = self._before(v.optimizer, state, v.update_norm)
        state.previous_param_norm = v.param_norm
        ratio = ratio_mod.ratios(v.update_norm, before)
        state.ratio_rows += 1
        if state.ratio_rows == 1:
            state.first_update = ratio_mod.largest(
                state, ratio, before, v.update_norm, v.grad_norm, (v.names, v.group_of, v.lr)
            )
        if not ratio_mod.busy(state, ratio, before):
            return
        facts = (v.names, v.group_of, v.lr, v.has_grad_t)
        where = (v.optimizer, v.step)
        ratio_mod.row(self.sink, state, where, ratio, before, facts, state.ratio_rows)


def _still(update: torch.Tensor | None, param: torch.Tensor | None) -> torch.Tensor | bool:
    """Tensors (one row or rows × tensors) whose update ‖Δθ‖ is at most ``STILL`` × ‖θ‖
    after it. Not measured (``stats="grad-norms"``: NaN, or no update) counts as still:
    the gradient alone then decides."""
    if update is None or param is None:
        return True
    return ~(update > STILL * param)


def _moved(update: torch.Tensor | None, param: torch.Tensor | None, n: int) -> torch.Tensor:
    """‖Δθ‖/‖θ‖ after the update per tensor (NaN where not measured), for messages."""
    if update is None or param is None:
        return torch.full((n,), math.nan, dtype=torch.float64)
    return torch.where(param > 0, update / param, torch.where(update > 0, math.inf, 0.0))


def _move(v: StepView) -> float:
    """The step's whole update ‖Δθ‖/‖θ‖ (:func:`explode.moves`); NaN when it is not known
    (before the update, or not measured): the gradient alone then decides."""
    if v.update_norm is None or v.param_norm is None:
        return math.nan
    return float(explode.moves(v.update_norm, v.param_norm)[0])


def _any_nonfinite(v: StepView) -> bool:
    """Whether some gradient element of the step is NaN/Inf (``nonfinite-grad``'s case)."""
    return v.nonfinite is not None and bool((v.nonfinite > 0).any())


def _tiny(
    grad_norm: torch.Tensor,
    rms: torch.Tensor,
    top: float | torch.Tensor,
    converged: bool | torch.Tensor = False,
) -> torch.Tensor:
    """Gradients with an RMS below ``RMS_VANISH`` that are not zero up to rounding (at
    least ``STRUCTURAL_ZERO`` times the largest RMS, ``top``; one row or many), unless
    the loss has ``converged`` (see :func:`_converged`)."""
    tiny = (grad_norm > 0) & (rms < RMS_VANISH) & (rms >= STRUCTURAL_ZERO * top)
    return tiny & ~converged if isinstance(converged, torch.Tensor) else tiny & (not converged)


def _note_loss(state: State, loss: float | None) -> None:
    """Keep the first finite loss (rows are checked in step order) for :func:`_converged`."""
    if state.first_loss is None and loss is not None and math.isfinite(loss):
        state.first_loss = abs(loss)


def _converged(state: State, loss: float | None) -> bool:
    """Whether ``loss`` is at most ``CONVERGED`` × the run's first finite loss: a fit gone
    near zero, where small gradients are what success looks like. A loss that was tiny
    from the start (a loss scaled down by mistake) never counts as converged."""
    if loss is None or state.first_loss is None or not math.isfinite(loss):
        return False
    return abs(loss) <= CONVERGED * state.first_loss
