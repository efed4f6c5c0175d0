"""Loss and data checks: ``loss-diverging``, ``loss-plateau``, ``eval-mode-training``."""

from __future__ import annotations

import math
import statistics
from collections import deque

from torch import nn

from gradwatch.checks.view import StepView
from gradwatch.findings import Action, FindingSink, finding

SMOOTH = 10  # losses per median when comparing with the running minimum
DIVERGE_MIN_STEPS = 20
DIVERGE_FACTOR = 2.0
DIVERGE_FIRST_FACTOR = 1e3
NOISE_MADS = 4.0  # and above the best by this many median absolute deviations
PLATEAU_STEPS, PLATEAU_RANGE = 20, 1e-8
_MODE_DEPENDENT = (
    nn.modules.dropout._DropoutNd,
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
)


class LossChecks:
    """Loss-curve checks of one run (per optimizer)."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self._recent: dict[int, deque[float]] = {}
        self._best: dict[int, float] = {}
        self._first: dict[int, float] = {}
        self._count: dict[int, int] = {}
        self._noise: dict[int, float] = {}

    def observe(self, v: StepView) -> None:
        """Feed one finite loss value."""
        self.observe_loss(v.optimizer, v.step, v.loss)

    def observe_loss(self, o: int, step: int, loss: float | None) -> None:
        """Feed optimizer ``o``'s loss of step ``step`` (ignored unless finite)."""
        if loss is None or not math.isfinite(loss):
            return
        recent = self._recent.setdefault(o, deque(maxlen=max(SMOOTH, PLATEAU_STEPS)))
        recent.append(loss)
        self._first.setdefault(o, loss)
        self._count[o] = self._count.get(o, 0) + 1
        window = list(recent)[-SMOOTH:]
        smoothed = statistics.median(window)
        if len(window) == SMOOTH and smoothed < self._best.get(o, math.inf):
            # the noise of the window that set the best: minibatch noise alone must not
            # read as divergence (the minimum of noisy medians is biased low)
            self._best[o] = smoothed
            self._noise[o] = statistics.median(abs(x - smoothed) for x in window)
        self._diverging(o, step, smoothed)
        self._plateau(o, step, list(recent))

    def _diverging(self, o: int, step: int, smoothed: float) -> None:
        first, best = self._first[o], self._best.get(o)
        positive = first > 0 and best is not None and best > 0
        noise = self._noise.get(o, 0.0)
        rising = (
            positive
            and best is not None
            and smoothed >= DIVERGE_FACTOR * best
            and smoothed >= best + NOISE_MADS * noise
        )
        blown = first > 0 and smoothed >= DIVERGE_FIRST_FACTOR * first
        if self._count[o] >= DIVERGE_MIN_STEPS and (rising or blown):
            self.sink.report(
                finding(
                    "loss-diverging",
                    step,
                    f"the loss (median of the last {SMOOTH}: {smoothed:.4g}) is "
                    + (
                        f"{smoothed / first:.3g}× the first loss."
                        if blown
                        else f"{smoothed / (best or 1):.3g}× its best so far ({best:.4g})."
                    ),
                    "lower the learning rate, check the scheduler, or look for a data shift.",
                    optimizer=o,
                    details={"recent_median": smoothed, "best": best, "first": first},
                )
            )
        elif not (rising or blown):
            self.sink.clear("loss-diverging", None, o)

    def _plateau(self, o: int, step: int, recent: list[float]) -> None:
        if len(recent) >= PLATEAU_STEPS and max(recent) - min(recent) < PLATEAU_RANGE:
            self.sink.report(
                finding(
                    "loss-plateau",
                    step,
                    f"the loss has not moved for {PLATEAU_STEPS} steps (range "
                    f"{max(recent) - min(recent):.2g}).",
                    "check that parameters receive gradients and the learning rate is not 0, or "
                    "stop: training has converged.",
                    optimizer=o,
                    details={"range": max(recent) - min(recent), "loss": recent[-1]},
                )
            )
        else:
            self.sink.clear("loss-plateau", None, o)


def mode_dependent_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Dropout/normalisation modules whose eval mode matters for training: their own
    parameters are trainable, or (dropout) their parent module has trainable parameters."""
    out: list[tuple[str, nn.Module]] = []
    parents = {name: mod for name, mod in model.named_modules()}
    for name, mod in model.named_modules():
        if not isinstance(mod, _MODE_DEPENDENT):
            continue
        own = list(mod.parameters(recurse=False))
        parent = parents.get(name.rpartition(".")[0], model)
        relevant = (
            any(p.requires_grad for p in own)
            if own
            else any(p.requires_grad for p in parent.parameters())
        )
        if relevant:
            out.append((name, mod))
    return out


def all_training(root: nn.Module, modules: list[tuple[str, nn.Module]]) -> bool:
    """Whether the model and its relevant dropout/norm layers are all in train() mode."""
    return root.training and all(mod.training for _, mod in modules)


def eval_mode(
    sink: FindingSink, step: int, root: nn.Module, modules: list[tuple[str, nn.Module]]
) -> Action:
    """``eval-mode-training``: the model or a relevant dropout/norm layer is in eval()."""
    in_eval = [name for name, mod in modules if not mod.training]
    if not root.training or in_eval:
        return sink.report(
            finding(
                "eval-mode-training",
                step,
                (
                    "the model is in eval() mode"
                    if not root.training
                    else f"{len(in_eval)} dropout/normalisation layers are in eval() mode"
                )
                + " while it trains, so dropout is off and batch-norm statistics are frozen.",
                "call model.train() before the training loop (and after every validation that "
                "calls model.eval()).",
                details={"modules_in_eval": in_eval[:20], "root_training": root.training},
            )
        )
    sink.clear("eval-mode-training")
    return "none"
