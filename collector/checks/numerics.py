"""Numerics checks: ``nonfinite-loss``, ``nonfinite-grad``, ``nonfinite-param``,
``exploding-grad``, ``vanishing-grad``, ``update-ratio``. Vectorised over tensors."""

from __future__ import annotations

import math

import torch

from gradwatch.catalogue import Severity
from gradwatch.checks.view import StepView
from gradwatch.findings import Action, FindingSink, finding

WINDOW = 100  # steps of gradient-norm history for the rolling median
MIN_HISTORY = 10
EXPLODE_FACTOR = 10.0
RMS_EXPLODE = 1e6
GROWTH, GROWTH_STEPS = 2.0, 5  # the norm doubles at every step, 5 steps in a row
RMS_VANISH = 1e-7
VANISH_STEPS = 5
RATIO_WARN = (1e-4, 1e-1)
RATIO_ERROR = (1e-8, 10.0)
RATIO_WARN_STEPS = 20
RATIO_ERROR_STEPS = 3


class NumericsChecks:
    """Numerics checks of one run, with per-optimizer histories."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self._history: dict[int, list[torch.Tensor]] = {}
        self._vanish: dict[int, torch.Tensor] = {}
        self._growth: dict[int, torch.Tensor] = {}
        self._ratio_warn: dict[int, torch.Tensor] = {}
        self._ratio_error: dict[int, torch.Tensor] = {}
        self._max_lr: dict[int, list[float]] = {}

    def loss(self, v: StepView) -> Action:
        """``nonfinite-loss``."""
        if v.loss is not None and not math.isfinite(v.loss):
            return self.sink.report(
                finding(
                    "nonfinite-loss",
                    v.step,
                    f"the loss is {v.loss}.",
                    "look for log(0), division by ~0, an exploding learning rate or bad inputs; "
                    "watch(checks={'nonfinite-loss': 'raise'}) stops at the first one.",
                    optimizer=v.optimizer,
                    details={"loss": v.loss},
                )
            )
        self.sink.clear("nonfinite-loss", None, v.optimizer)
        return "none"

    def grads(self, v: StepView) -> list[Action]:
        """``nonfinite-grad`` (first tensor in forward order named) and ``exploding-grad``."""
        assert v.grad_norm is not None and v.nonfinite is not None
        actions: list[Action] = []
        bad = torch.nonzero(v.nonfinite > 0).flatten().tolist()
        if bad:
            counts = {v.names[i]: int(v.nonfinite[i]) for i in bad}
            actions.append(
                self.sink.report(
                    finding(
                        "nonfinite-grad",
                        v.step,
                        f"{sum(counts.values())} gradient elements are NaN/Inf, first in this "
                        "tensor "
                        f"({len(bad)} tensors affected).",
                        "find the operation that produced it (gradwatch names the first tensor; "
                        "torch.autograd.detect_anomaly pinpoints the op), lower the learning "
                        "rate or "
                        "clip gradients; with AMP use a GradScaler.",
                        param=v.names[bad[0]],
                        optimizer=v.optimizer,
                        details={"counts": counts, "numel": {v.names[i]: v.numel[i] for i in bad}},
                    )
                )
            )
        else:
            self._clear_all("nonfinite-grad", v)
        actions += self._exploding(v)
        self._vanishing(v)
        return actions

    def _clear_all(self, check: str, v: StepView) -> None:
        for name in v.names:
            self.sink.clear(check, name, v.optimizer)

    def _exploding(self, v: StepView) -> list[Action]:
        assert v.grad_norm is not None
        norms = v.grad_norm
        history = self._history.setdefault(v.optimizer, [])
        rms = norms / torch.tensor(v.numel, dtype=torch.float64).clamp(min=1).sqrt()
        exploding = torch.isfinite(norms) & (rms > RMS_EXPLODE)
        growth = self._growth.get(v.optimizer, torch.zeros(len(v.names), dtype=torch.long))
        if history:
            growth = (growth + 1) * (torch.isfinite(norms) & (norms > GROWTH * history[-1]))
            self._growth[v.optimizer] = growth
            exploding |= growth >= GROWTH_STEPS
        median = None
        if len(history) >= MIN_HISTORY:
            median = torch.stack(history).median(dim=0).values
            exploding |= torch.isfinite(norms) & (median > 0) & (norms > EXPLODE_FACTOR * median)
        if torch.isfinite(norms).all():
            history.append(norms)
            if len(history) > WINDOW:
                history.pop(0)
        actions: list[Action] = []
        for i in torch.nonzero(exploding).flatten().tolist():
            actions.append(
                self.sink.report(
                    finding(
                        "exploding-grad",
                        v.step,
                        f"the gradient norm jumped to {float(norms[i]):.3g}"
                        + (
                            f", {float(norms[i] / median[i]):.0f}× its median of the last "
                            f"{len(history)} steps."
                            if median is not None and median[i] > 0
                            else "."
                        ),
                        "lower the learning rate, add warm-up or clip gradients "
                        "(torch.nn.utils.clip_grad_norm_).",
                        param=v.names[i],
                        optimizer=v.optimizer,
                        details={
                            "grad_norm": float(norms[i]),
                            "rms": float(rms[i]),
                            "rolling_median": None if median is None else float(median[i]),
                        },
                    )
                )
            )
        for i in torch.nonzero(~exploding).flatten().tolist():
            self.sink.clear("exploding-grad", v.names[i], v.optimizer)
        return actions

    def _vanishing(self, v: StepView) -> None:
        assert v.grad_norm is not None
        rms = v.grad_norm / torch.tensor(v.numel, dtype=torch.float64).clamp(min=1).sqrt()
        tiny = torch.tensor(v.has_grad) & (v.grad_norm > 0) & (rms < RMS_VANISH)
        streak = self._vanish.get(v.optimizer, torch.zeros(len(v.names), dtype=torch.long))
        streak = (streak + 1) * tiny
        self._vanish[v.optimizer] = streak
        for i in torch.nonzero(streak >= VANISH_STEPS).flatten().tolist():
            self.sink.report(
                finding(
                    "vanishing-grad",
                    v.step,
                    f"the gradient of this tensor is vanishing (RMS {float(rms[i]):.2g} for "
                    f"{int(streak[i])} steps).",
                    "check the initialisation, activations (saturating sigmoid/tanh) and "
                    "normalisation between this layer and the loss.",
                    param=v.names[i],
                    optimizer=v.optimizer,
                    details={"rms": float(rms[i])},
                )
            )

    def params(self, v: StepView) -> None:
        """``nonfinite-param`` after the update."""
        assert v.param_norm is not None
        bad = torch.nonzero(~torch.isfinite(v.param_norm)).flatten().tolist()
        if bad:
            self.sink.report(
                finding(
                    "nonfinite-param",
                    v.step,
                    f"after this step {len(bad)} parameter tensors hold NaN/Inf, first this one.",
                    "stop here: the run cannot recover; find the first non-finite gradient or loss "
                    "(watch(checks={'nonfinite-grad': 'skip'}) drops such updates).",
                    param=v.names[bad[0]],
                    optimizer=v.optimizer,
                    details={"tensors": [v.names[i] for i in bad]},
                )
            )

    def update_ratio(self, v: StepView) -> None:
        """``update-ratio``: ‖Δθ‖/‖θ‖ out of range, weight matrices only, outside LR warm-up."""
        assert v.param_norm is not None and v.update_norm is not None
        max_lr = self._max_lr.setdefault(v.optimizer, list(v.lr))
        for g, lr in enumerate(v.lr):
            max_lr[g] = max(max_lr[g], lr) if math.isfinite(lr) else max_lr[g]
        settled = torch.tensor([v.lr[g] >= 0.1 * max_lr[g] for g in v.group_of], dtype=torch.bool)
        matrix = torch.tensor(
            [len(s) >= 2 for s in v.shapes] or [False] * len(v.names),
            dtype=torch.bool,
        )
        ok = matrix & settled & torch.tensor(v.has_grad) & (v.param_norm > 0)
        ratio = v.update_norm / v.param_norm
        levels: list[tuple[str, tuple[float, float], int, Severity]] = [
            ("warn", RATIO_WARN, RATIO_WARN_STEPS, "warning"),
            ("error", RATIO_ERROR, RATIO_ERROR_STEPS, "error"),
        ]
        for key, (low, high), steps, severity in levels:
            store = self._ratio_warn if key == "warn" else self._ratio_error
            out = ok & ((ratio < low) | (ratio > high))
            streak = store.get(v.optimizer, torch.zeros(len(v.names), dtype=torch.long))
            streak = (streak + 1) * out
            store[v.optimizer] = streak
            for i in torch.nonzero(streak >= steps).flatten().tolist():
                self.sink.report(
                    finding(
                        "update-ratio",
                        v.step,
                        f"updates are {float(ratio[i]):.2g}× the parameter's size for "
                        f"{int(streak[i])} steps (healthy: {low:g} to {high:g}).",
                        "too small: raise the learning rate or check for a frozen/starved layer; "
                        "too large: lower the learning rate or add warm-up.",
                        severity=severity,
                        param=v.names[i],
                        optimizer=v.optimizer,
                        details={"ratio": float(ratio[i]), "lr": v.lr[v.group_of[i]]},
                    )
                )
