"""Numerics checks: ``nonfinite-loss``, ``nonfinite-grad``, ``nonfinite-param``,
``exploding-grad``, ``vanishing-grad``, ``update-ratio``.

Vectorised over tensors with a handful of small host ops per step; per-tensor Python work
happens only for tensors that are (or just stopped being) in a bad state.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gradwatch.catalogue import Severity
from gradwatch.checks.view import StepView, Window, held_for, held_for_rows
from gradwatch.findings import Action, Finding, FindingSink, finding

WINDOW = 100  # steps of gradient-norm history for the rolling median
MIN_HISTORY = 10
MEDIAN_EVERY = 10  # the rolling median is recomputed every this many steps
EXPLODE_FACTOR = 10.0
RMS_EXPLODE = 1e6
GROWTH, GROWTH_STEPS = 2.0, 5  # the norm doubles at every step, 5 steps in a row
RMS_VANISH = 1e-7
STRUCTURAL_ZERO = 1e-4  # RMS below this fraction of the largest one: zero up to rounding
FIRST_LAST_RATIO = 1e-3
VANISH_STEPS = 5
RATIO_WARN = (1e-4, 1e-1)
RATIO_ERROR = (1e-8, 10.0)
RATIO_WARN_STEPS = 20
RATIO_ERROR_STEPS = 3
#: update-ratio levels: streak key, healthy range, steps to hold, severity
_RATIO_LEVELS: list[tuple[str, tuple[float, float], int, Severity]] = [
    ("warn", RATIO_WARN, RATIO_WARN_STEPS, "warning"),
    ("error", RATIO_ERROR, RATIO_ERROR_STEPS, "error"),
]

#: ``(check, view, tensor index, ‖θ‖ before the step) -> details.origin`` (set by the run)
OriginOf = Callable[[str, StepView, "int | None", "float | None"], "dict[str, Any] | None"]


@dataclass
class _State:
    """Per-optimizer history."""

    sqrt_numel: torch.Tensor
    matrix: torch.Tensor
    history: torch.Tensor
    filled: int = 0
    median: torch.Tensor | None = None
    last: torch.Tensor | None = None
    growth: torch.Tensor | None = None
    vanish: torch.Tensor | None = None
    ratio: int = 0
    streaks: dict[str, torch.Tensor] = field(default_factory=dict)
    max_lr: list[float] = field(default_factory=list)
    previous_param_norm: torch.Tensor | None = None
    ends: tuple[int, int] | None = None  # first and last weight matrix in forward order


class NumericsChecks:
    """Numerics checks of one run, with per-optimizer histories."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self._state: dict[int, _State] = {}
        self._lock = threading.Lock()  # value checks may run live, update checks on I/O
        self._deep: set[int] = set()  # optimizers whose first/last ratio is low right now
        self.origin: OriginOf | None = None  # NaN provenance (gradwatch.nanorigin)

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

    def _of(self, v: StepView) -> _State:
        state = self._state.get(v.optimizer)
        if state is None:  # created once; later reads need no lock
            with self._lock:
                return self._create(v)
        return state

    def _create(self, v: StepView) -> _State:
        state = self._state.get(v.optimizer)
        if state is None:
            state = self._state[v.optimizer] = _State(
                sqrt_numel=torch.tensor(v.numel, dtype=torch.float64).clamp(min=1).sqrt(),
                matrix=torch.tensor([len(s) >= 2 for s in v.shapes] or [False] * len(v.names)),
                history=torch.zeros(WINDOW, len(v.names), dtype=torch.float64),
            )
        return state

    def loss(self, v: StepView) -> Action:
        """``nonfinite-loss``."""
        if v.loss is not None and not math.isfinite(v.loss):
            message, details = self._with_origin(
                "nonfinite-loss", v, f"the loss is {v.loss}.", {"loss": v.loss}
            )
            return self.sink.report(
                finding(
                    "nonfinite-loss",
                    v.step,
                    message,
                    "look for log(0), division by ~0, an exploding learning rate or bad inputs; "
                    "watch(checks={'nonfinite-loss': 'raise'}) stops at the first one.",
                    optimizer=v.optimizer,
                    details=details,
                )
            )
        self.sink.clear("nonfinite-loss", None, v.optimizer)
        return "none"

    def grads(self, v: StepView) -> list[Action]:
        """``nonfinite-grad``, ``exploding-grad`` and ``vanishing-grad``."""
        assert v.grad_norm is not None and v.nonfinite is not None
        actions: list[Action] = []
        if self.sink.enabled("nonfinite-grad"):
            actions += self._nonfinite(v)
        state = self._of(v)
        rms = v.grad_norm / state.sqrt_numel
        if self.sink.enabled("exploding-grad"):
            actions += self._exploding(v, state, rms)
        if self.sink.enabled("vanishing-grad"):
            self._vanishing(v, state, rms)
        return actions

    def _nonfinite(self, v: StepView) -> list[Action]:
        assert v.nonfinite is not None
        if not bool((v.nonfinite > 0).any()):
            self.sink.settle("nonfinite-grad", v.optimizer, set())
            return []
        bad = [i for i in v.order if v.nonfinite[i] > 0]  # first in forward order
        counts = {v.names[i]: int(v.nonfinite[i]) for i in bad}
        self.sink.settle("nonfinite-grad", v.optimizer, {v.names[i] for i in bad[:1]})
        message, details = self._with_origin(
            "nonfinite-grad",
            v,
            f"{sum(counts.values())} gradient elements are NaN/Inf; the first layer (in "
            f"forward order) where they appear is this one ({len(bad)} tensors affected).",
            {"counts": counts, "numel": {v.names[i]: v.numel[i] for i in bad}},
        )
        return [
            self.sink.report(
                finding(
                    "nonfinite-grad",
                    v.step,
                    message,
                    "find the operation that produced it (details.origin; "
                    "torch.autograd.detect_anomaly pinpoints it too), lower the learning rate or "
                    "clip gradients; with fp16 use a GradScaler.",
                    param=v.names[bad[0]],
                    optimizer=v.optimizer,
                    details=details,
                )
            )
        ]

    def _exploding(self, v: StepView, state: _State, rms: torch.Tensor) -> list[Action]:
        assert v.grad_norm is not None
        norms = v.grad_norm
        finite = torch.isfinite(norms)
        exploding = finite & (rms > RMS_EXPLODE)
        if state.last is not None:
            growing = norms > GROWTH * state.last
            if state.growth is not None or bool(growing.any()):  # most steps: none grows
                state.growth = held_for(state.growth, finite & growing)
                exploding |= state.growth >= GROWTH_STEPS
                if not bool(state.growth.any()):
                    state.growth = None
        if _refresh_median(state):
            exploding |= finite & _above_median(norms, state)
        if bool(finite.all()):
            state.history[state.filled % WINDOW] = norms
            state.filled += 1
            state.last = norms
        if bool(exploding.any()):
            # a jump of a gradient that is zero up to rounding (a bias feeding a
            # normalisation layer) is rounding noise, not an explosion
            top = float(rms[finite].max()) if bool(finite.any()) else 0.0
            exploding &= rms >= STRUCTURAL_ZERO * top
        if not bool(exploding.any()):
            self.sink.settle("exploding-grad", v.optimizer, set())
            return []
        bad = torch.nonzero(exploding).flatten().tolist()
        self.sink.settle("exploding-grad", v.optimizer, {v.names[i] for i in bad})
        return [self._explosion(v, state, rms, i) for i in bad]

    def _explosion(self, v: StepView, state: _State, rms: torch.Tensor, i: int) -> Action:
        assert v.grad_norm is not None
        norm, median = float(v.grad_norm[i]), state.median
        times = (
            f", {norm / float(median[i]):.0f}× its median of the last "
            f"{min(state.filled, WINDOW)} steps."
            if median is not None and median[i] > 0
            else "."
        )
        return self.sink.report(
            finding(
                "exploding-grad",
                v.step,
                f"the gradient norm jumped to {norm:.3g}{times}",
                "lower the learning rate, add warm-up or clip gradients "
                "(torch.nn.utils.clip_grad_norm_).",
                param=v.names[i],
                optimizer=v.optimizer,
                details={
                    "grad_norm": norm,
                    "rms": float(rms[i]),
                    "rolling_median": None if median is None else float(median[i]),
                },
            )
        )

    def _vanishing(self, v: StepView, state: _State, rms: torch.Tensor) -> None:
        assert v.grad_norm is not None
        small = rms < RMS_VANISH
        quiet = state.vanish is None and v.optimizer not in self._deep
        if quiet and not bool(small.any()) and self._first_last_ratio(v, state) is None:
            return  # the common case: nothing small, no streak, no deep-net ratio
        finite = torch.isfinite(rms)
        top = float(rms[finite].max()) if bool(finite.any()) else 0.0
        # a gradient ~1e-4× smaller than the largest one is zero up to rounding (a bias
        # feeding a normalisation layer): structural, not vanishing
        tiny = _tiny(v.grad_norm, rms, top) & v.has_grad_t
        ratio = self._first_last_ratio(v, state)
        if ratio is not None:
            tiny = tiny.clone()
            tiny[ratio[0]] = True
        state.vanish = held_for(state.vanish, tiny)
        if not bool(state.vanish.any()):
            state.vanish = None
            return
        for i in torch.nonzero(state.vanish >= VANISH_STEPS).flatten().tolist():
            extra = f", {ratio[1]:.2g}× the last layer's norm" if ratio and i == ratio[0] else ""
            self.sink.report(
                finding(
                    "vanishing-grad",
                    v.step,
                    f"the gradient of this tensor is vanishing (RMS {float(rms[i]):.2g}{extra} "
                    f"for {int(state.vanish[i])} steps).",
                    "check the initialisation, activations (saturating sigmoid/tanh) and "
                    "normalisation between this layer and the loss.",
                    param=v.names[i],
                    optimizer=v.optimizer,
                    details={"rms": float(rms[i])},
                )
            )

    def _first_last_ratio(self, v: StepView, state: _State) -> tuple[int, float] | None:
        """(first weight matrix, its norm / the last one's) when below 1e-3 (deep nets)."""
        assert v.grad_norm is not None
        first, last = _ends(state, v.order)
        if first < 0 or not (v.has_grad[first] and v.has_grad[last]):
            return None
        top = float(v.grad_norm[last])
        ratio = float(v.grad_norm[first]) / top if top > 0 else 0.0
        if 0 < ratio < FIRST_LAST_RATIO:
            self._deep.add(v.optimizer)
            return first, ratio
        self._deep.discard(v.optimizer)
        return None

    # -- a window of rows at once (gradwatch.stepcheck) ----------------------------------
    # The per-row methods above are the reference. For rows on which they would report
    # nothing and only update their history, these do the same for many rows in a few ops.

    def has_history(self, optimizer: int) -> bool:
        """Whether ``optimizer``'s histories exist (its first checked row creates them)."""
        return optimizer in self._state

    def rows_idle(self, optimizer: int, vanishing: bool) -> bool:
        """Whether no per-row history of ``optimizer`` is in a state the window methods do
        not follow (a vanishing streak, a deep-net ratio)."""
        state = self._state.get(optimizer)
        if state is None:
            return False  # the first row creates it
        return not (vanishing and (state.vanish is not None or optimizer in self._deep))

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
        rms = g / state.sqrt_numel
        quiet = torch.isfinite(g).all(dim=1)
        if exploding:
            quiet &= ~(rms > RMS_EXPLODE).any(dim=1)
        if vanishing:  # as _vanishing: small, but not zero up to rounding
            quiet &= ~_tiny(g, rms, rms.max(dim=1, keepdim=True).values).any(dim=1)
            first, last = _ends(state, order)
            if first >= 0:
                top = g[:, last]
                ratio = torch.where(top > 0, g[:, first] / top, 0.0)
                quiet &= ~((ratio > 0) & (ratio < FIRST_LAST_RATIO))
        return quiet

    def exploding_rows(self, optimizer: int, win: Window, start: int, end: int) -> int:
        """``exploding-grad`` over rows ``start:end`` that :meth:`quiet_rows` passed: adds
        them to the history, up to the first row that a growth streak or the rolling median
        flags; returns how many rows were taken."""
        state = self._state[optimizer]
        g = win.grad_norm
        growth: torch.Tensor | None = None
        if state.last is not None:  # every row here is finite: each one extends the history
            previous = torch.cat([state.last.unsqueeze(0), g[start : end - 1]])
            growth = held_for_rows(state.growth, g[start:end] > GROWTH * previous)
            flagged = (growth >= GROWTH_STEPS).any(dim=1)
            if bool(flagged.any()):
                end = start + int(flagged.nonzero()[0])
        j = start
        while j < end:
            filled = state.filled
            measured = _refresh_median(state)
            if filled < MIN_HISTORY:
                stop = min(end, j + MIN_HISTORY - filled)
            else:  # the median holds until the history reaches the next multiple
                stop = min(end, j + MEDIAN_EVERY - filled % MEDIAN_EVERY)
            full = stop
            if measured:
                flagged = _above_median(g[j:stop], state).any(dim=1)
                if bool(flagged.any()):
                    stop = j + int(flagged.nonzero()[0])
            if stop > j:
                at = filled % WINDOW  # segments never cross the end of the ring
                state.history[at : at + stop - j] = g[j:stop]
                state.filled = filled + stop - j
                state.last = g[stop - 1]
            j = stop
            if stop < full:
                break
        if j > start and state.last is not None and growth is not None:
            held = growth[j - start - 1]
            state.growth = held if bool(held.any()) else None
        return j - start

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
        previous = state.previous_param_norm
        first = param[0] if previous is None or previous.shape != update.shape[1:] else previous
        before = torch.cat([first.unsqueeze(0), param[:-1]])
        state.previous_param_norm = param[-1]
        if not state.max_lr:
            state.max_lr = list(win.lr[start])
        settled_rows: list[list[bool]] = []
        for lr in win.lr[start:end]:
            for g, x in enumerate(lr):
                if math.isfinite(x):
                    state.max_lr[g] = max(state.max_lr[g], x)
            settled_rows.append([x >= 0.1 * state.max_lr[g] for g, x in enumerate(lr)])
        ratio = update / before
        out_of_range = (ratio < RATIO_WARN[0]) | (ratio > RATIO_WARN[1])
        if not state.streaks and not bool((out_of_range & state.matrix).any()):
            return  # the common case: every weight matrix moves at a healthy rate
        ok = state.matrix & (before > 0)
        if not all(all(s) for s in settled_rows):
            ok = ok & torch.tensor([[s[g] for g in group_of] for s in settled_rows])
        levels = _RATIO_LEVELS
        hits: list[tuple[int, int, int]] = []  # (row, level, tensor): the first of each
        streaks: list[torch.Tensor] = []
        for n, (key, (low, high), steps, _) in enumerate(levels):
            streak = held_for_rows(state.streaks.get(key), ok & ((ratio < low) | (ratio > high)))
            streaks.append(streak)
            if bool(streak[-1].any()):
                state.streaks[key] = streak[-1]
            else:
                state.streaks.pop(key, None)
            held = streak >= steps
            if bool(held.any()):
                rows = torch.where(held, torch.arange(len(held)).unsqueeze(1), len(held))
                first_row = rows.min(dim=0).values.tolist()
                hits += [(r, n, i) for i, r in enumerate(first_row) if r < len(held)]
        # later rows of a condition that holds would only repeat the finding
        for r, n, i in sorted(hits):
            _, bounds, _, severity = levels[n]
            seen = (float(ratio[r, i]), int(streaks[n][r, i]), win.lr[start + r][group_of[i]])
            self.sink.report(
                _ratio_finding(win.steps[start + r], optimizer, names[i], seen, bounds, severity)
            )

    def params(self, v: StepView) -> None:
        """``nonfinite-param`` after the update."""
        assert v.param_norm is not None
        if bool(torch.isfinite(v.param_norm).all()):
            return
        bad = [i for i in v.order if not math.isfinite(float(v.param_norm[i]))]
        message = f"after this step {len(bad)} parameter tensors hold NaN/Inf, first this one."
        details: dict[str, Any] = {"tensors": [v.names[i] for i in bad]}
        if not self.sink.active("nonfinite-param", v.optimizer):  # origin at the onset only
            state = self._state.get(v.optimizer)
            norms = None if state is None else state.previous_param_norm
            before = None if norms is None or len(norms) <= bad[0] else float(norms[bad[0]])
            message, details = self._with_origin(
                "nonfinite-param", v, message, details, bad[0], before
            )
        self.sink.report(
            finding(
                "nonfinite-param",
                v.step,
                message,
                "stop here: the run cannot recover; find the first non-finite gradient or loss "
                "(watch(checks={'nonfinite-grad': 'skip'}) drops such updates).",
                param=v.names[bad[0]],
                optimizer=v.optimizer,
                details=details,
            )
        )

    def update_ratio(self, v: StepView) -> None:
        """``update-ratio``: ‖Δθ‖/‖θ_before‖ out of range, for weight matrices, outside LR
        warm-up and decay tails (LR below 10% of its maximum so far)."""
        assert v.param_norm is not None and v.update_norm is not None
        state = self._of(v)
        before, state.previous_param_norm = state.previous_param_norm, v.param_norm
        if not state.max_lr:
            state.max_lr = list(v.lr)
        for g, lr in enumerate(v.lr):
            if math.isfinite(lr):
                state.max_lr[g] = max(state.max_lr[g], lr)
        if before is None or before.shape != v.update_norm.shape:
            before = v.param_norm  # first step: ‖θ_after‖ stands in for ‖θ_before‖
        ratio = v.update_norm / before
        out_of_range = (ratio < RATIO_WARN[0]) | (ratio > RATIO_WARN[1])
        if not state.streaks and not bool((out_of_range & state.matrix).any()):
            return  # the common case: every weight matrix moves at a healthy rate
        settled = torch.tensor([v.lr[g] >= 0.1 * state.max_lr[g] for g in v.group_of])
        ok = state.matrix & settled & v.has_grad_t & (before > 0)
        levels = _RATIO_LEVELS
        for key, (low, high), steps, severity in levels:
            out = ok & ((ratio < low) | (ratio > high))
            streak = held_for(state.streaks.get(key), out)
            if bool(streak.any()):
                state.streaks[key] = streak
            else:
                state.streaks.pop(key, None)
            for i in torch.nonzero(streak >= steps).flatten().tolist():
                self.sink.report(
                    _ratio_finding(
                        v.step,
                        v.optimizer,
                        v.names[i],
                        (float(ratio[i]), int(streak[i]), v.lr[v.group_of[i]]),
                        (low, high),
                        severity,
                    )
                )


def _ends(state: _State, order: list[int]) -> tuple[int, int]:
    """The first and last weight matrix in forward order (``(-1, -1)``: fewer than two)."""
    if state.ends is None:
        weights = [i for i in order if bool(state.matrix[i])]
        state.ends = (weights[0], weights[-1]) if len(weights) >= 2 else (-1, -1)
    return state.ends


def _ratio_finding(
    step: int,
    optimizer: int,
    name: str,
    seen: tuple[float, int, float],
    bounds: tuple[float, float],
    severity: Severity,
) -> Finding:
    """An ``update-ratio`` finding (``seen``: the ratio, the steps it held, the LR)."""
    ratio, steps, lr = seen
    low, high = bounds
    return finding(
        "update-ratio",
        step,
        f"updates are {ratio:.2g}× the parameter's size for {steps} steps "
        f"(healthy: {low:g} to {high:g}).",
        "too small: raise the learning rate or check for a frozen or starved layer; too "
        "large: lower the learning rate or add warm-up.",
        severity=severity,
        param=name,
        optimizer=optimizer,
        details={"ratio": ratio, "lr": lr},
    )


def _refresh_median(state: _State) -> bool:
    """Recompute the rolling median of the gradient norms when it is due (none yet, or the
    history just reached a multiple of ``MEDIAN_EVERY``); whether the history is long
    enough for the median to be used."""
    if state.filled < MIN_HISTORY:
        return False
    if state.median is None or state.filled % MEDIAN_EVERY == 0:
        state.median = state.history[: min(state.filled, WINDOW)].median(dim=0).values
    return True


def _above_median(norms: torch.Tensor, state: _State) -> torch.Tensor:
    """Norms ``EXPLODE_FACTOR`` times above their rolling median (one row or many)."""
    median = state.median
    assert median is not None
    return (median > 0) & (norms > EXPLODE_FACTOR * median)


def _tiny(grad_norm: torch.Tensor, rms: torch.Tensor, top: float | torch.Tensor) -> torch.Tensor:
    """Gradients with an RMS below ``RMS_VANISH`` that are not zero up to rounding: at
    least ``STRUCTURAL_ZERO`` times the largest RMS (``top``; one row or many)."""
    return (grad_norm > 0) & (rms < RMS_VANISH) & (rms >= STRUCTURAL_ZERO * top)
