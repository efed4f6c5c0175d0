"""Loss and data checks: ``loss-diverging``, ``loss-plateau``, ``eval-mode-training``."""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable

from torch import nn

from gradwatch.checks.findings import Action, FindingSink, finding, listing
from gradwatch.checks.fmt import counted, num, times
from gradwatch.checks.view import StepView, Window
from gradwatch.core import checkids

SMOOTH = 10  # losses per median when comparing with the running minimum
DIVERGE_MIN_STEPS = 20
#: the median of the last SMOOTH losses this many times its best (the lowest such median)
#: and NOISE_MADS of that window's deviations above it: noisy mini-batches, GAN generator
#: losses and a loss back at chance level after a good start stay below it
DIVERGE_FACTOR = 10.0
DIVERGE_FIRST_FACTOR = 1e3  # or this many times the first loss
NOISE_MADS = 6.0
#: and risen by at least this share of the first loss: a loss that converged near zero
#: may wander many times its best while staying negligible
FIRST_SHARE = 0.1
#: a rise (not a blow-up) is reported once it has held for this many losses in a row:
#: heavy-tailed losses (polynomial features, outlier-rich batches) have bursts in which the
#: median of ten stands many times its luckiest value for up to ~2 windows and then settles
#: (pytorch/examples regression: at most 23 losses in a row over 200 seeds)
DIVERGE_PERSIST = 3 * SMOOTH
#: and the weights ran away over those losses: the updates moved them by this many times
#: their own size in all (the sum of the update norms against the weight norm at the
#: start). A rise alone is no evidence that the optimisation broke: the loss of a changing
#: objective (RL value targets and episode sums that grow as the policy improves, a
#: curriculum whose data gets harder, a new task at every meta-learning step) moves while
#: the weights move at their usual pace. Healthy updates are a small fraction of the
#: weights (update-ratio: above 1x per step is far too large; at 1% per step, 30 steps
#: travel 0.3x); a rate that breaks training throws the weights across and away from where
#: the loss was low (83x in corpus case loss_bug_diverging_slowly; the corpus's correct
#: programs at most 0.84x: an actor-critic at Adam 3e-2, meta-learning by hand)
RUNAWAY = 2.0
CALM_FACTOR, CALM_STEPS = 3.0, 20  # an episode ends after CALM_STEPS steps below 3x the best
PLATEAU_STEPS, PLATEAU_RANGE = 20, 1e-8
_DROPOUT = nn.modules.dropout._DropoutNd
_MODE_DEPENDENT = (
    nn.modules.dropout._DropoutNd,
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
)


#: the norms of one step's weights after its update and of the update itself
Motion = tuple[float, float]


def motion(v: StepView) -> Motion | None:
    """:data:`Motion` of one step (None when its statistics are not on the host)."""
    if v.param_norm is None or v.update_norm is None:
        return None
    return float(v.param_norm.norm()), float(v.update_norm.norm())


def motion_rows(win: Window, start: int, stop: int) -> list[Motion]:
    """:func:`motion` of rows ``start:stop`` of a window, at once."""
    weights: list[float] = win.param_norm[start:stop].norm(dim=1).tolist()
    updates: list[float] = win.update_norm[start:stop].norm(dim=1).tolist()
    return list(zip(weights, updates, strict=True))


class LossChecks:
    """Loss-curve checks of one run (per optimizer)."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self._recent: dict[int, deque[float]] = {}
        self._best: dict[int, float] = {}
        self._first: dict[int, float] = {}
        self._count: dict[int, int] = {}
        self._noise: dict[int, float] = {}
        self._rising: dict[int, tuple[int, int]] = {}  # optimizer -> (first step, losses)
        self._calm: dict[int, int] = {}  # open loss-diverging episodes: calm steps so far
        self._flat: set[int] = set()  # open loss-plateau episodes
        #: the motion of the steps of the last DIVERGE_PERSIST losses, per optimizer
        self._moves: dict[int, deque[Motion | None]] = {}
        #: told when the loss diverges, with the step and the words (set by the check engine:
        #: :meth:`gradwatch.checks.lr.LrChecks.diverged` escalates a too-large rate)
        self.diverged: Callable[[int, int, str], None] | None = None

    def observe(self, v: StepView) -> None:
        """Feed one finite loss value."""
        self.observe_loss(v.optimizer, v.step, v.loss, motion(v))

    def observe_loss(
        self, o: int, step: int, loss: float | None, moved: Motion | None = None
    ) -> None:
        """Feed optimizer ``o``'s loss of step ``step`` (ignored unless finite) and the
        :data:`Motion` of the step (None: unknown)."""
        if loss is None or not math.isfinite(loss):
            return
        moves = self._moves.get(o)
        if moves is None:
            moves = self._moves[o] = deque(maxlen=DIVERGE_PERSIST)
        moves.append(moved)
        recent = self._recent.get(o)
        if recent is None:
            recent = self._recent[o] = deque(maxlen=max(SMOOTH, PLATEAU_STEPS))
            self._first[o] = loss
        recent.append(loss)
        self._count[o] = self._count.get(o, 0) + 1
        n = len(recent)
        window = list(itertools.islice(recent, n - SMOOTH, n)) if n > SMOOTH else list(recent)
        smoothed = median(window)
        if len(window) == SMOOTH and smoothed < self._best.get(o, math.inf):
            # the noise of the window that set the best: minibatch noise alone must not
            # read as divergence (the minimum of noisy medians is biased low)
            self._best[o] = smoothed
            self._noise[o] = median([abs(x - smoothed) for x in window])
        self._diverging(o, step, smoothed)
        self._plateau(o, step, recent)

    def _diverging(self, o: int, step: int, smoothed: float) -> None:
        """``loss-diverging``. Invariant: the model gets worse at its task because of the
        optimisation. Evidence: the loss blew up (``DIVERGE_FIRST_FACTOR`` times its first
        value, at once), or it rose far above its best level and stayed there for
        ``DIVERGE_PERSIST`` losses while the updates threw the weights away (``RUNAWAY``)."""
        first, best = self._first[o], self._best.get(o)
        if first <= 0 or best is None or best <= 0:
            return  # losses that can be negative (log-likelihoods, GAN objectives)
        noise = self._noise.get(o, 0.0)
        rising = smoothed >= DIVERGE_FACTOR * best and smoothed >= best + max(
            NOISE_MADS * noise, FIRST_SHARE * first
        )
        blown = smoothed >= DIVERGE_FIRST_FACTOR * first
        since, held = self._rising.get(o, (step, 0)) if rising else (step, 0)
        if rising:
            self._rising[o] = (since, held + 1)
        else:
            self._rising.pop(o, None)
        runaway = self._ran_away(o) if held + 1 >= DIVERGE_PERSIST else None
        if self._count[o] >= DIVERGE_MIN_STEPS and (blown or runaway is not None):
            self._calm[o] = 0
            self._report(o, step, smoothed, since, held + 1, None if blown else runaway)
        elif o in self._calm:  # an open episode ends after CALM_STEPS calm steps
            self._calm[o] = self._calm[o] + 1 if smoothed < CALM_FACTOR * best else 0
            if self._calm[o] >= CALM_STEPS:
                del self._calm[o]
                self.sink.clear(checkids.LOSS_DIVERGING, None, o)

    def _ran_away(self, o: int) -> tuple[float, float] | None:
        """(the weight norm at the first of the last ``DIVERGE_PERSIST`` losses, the sum of
        the update norms over them) when the updates moved the weights ``RUNAWAY`` times
        their size or more (a non-finite sum too), else None (also when unknown)."""
        moves = self._moves.get(o)
        if moves is None or len(moves) < DIVERGE_PERSIST or any(m is None for m in moves):
            return None
        size = moves[0][0] if moves[0] is not None else 0.0
        travelled = math.fsum(m[1] for m in moves if m is not None)
        if not 0 < size < math.inf or travelled < RUNAWAY * size:
            return None
        return size, travelled

    def _report(
        self,
        o: int,
        step: int,
        smoothed: float,
        since: int,
        held: int,
        runaway: tuple[float, float] | None,
    ) -> None:
        """One ``loss-diverging`` finding: a blow-up (``runaway`` None) or a held rise with
        runaway weights; a too-large learning rate found before becomes an error."""
        first, best = self._first[o], self._best[o]
        if self.diverged is not None:
            grew = (
                f"{times(smoothed / first)} the first loss"
                if runaway is None
                else f"{times(smoothed / best)} its best"
            )
            self.diverged(o, step, f"the loss diverged ({grew})")
        if runaway is None:
            what = f"{times(smoothed / first)} the first loss ({num(first, 3)})."
        else:
            what = (
                f"{times(smoothed / best)} its best so far ({num(best, 3)}) and has stayed "
                f"that high for {held} losses in a row, since step {since}, while the "
                f"updates threw the weights away (over those losses they add up to "
                f"{times(runaway[1] / runaway[0])} the weights' norm, {num(runaway[0], 3)})."
            )
        details: dict[str, float | int] = {
            "recent_median": smoothed,
            "best": best,
            "first": first,
            "since": since,
        }
        if runaway is not None:
            details["weight_norm"], details["travelled"] = runaway
        self.sink.report(
            finding(
                checkids.LOSS_DIVERGING,
                step,
                f"the loss (median of the last {SMOOTH}: {num(smoothed, 3)}) is {what}",
                "lower the learning rate, check the scheduler, or look for a data shift.",
                optimizer=o,
                details=details,
            )
        )

    def _plateau(self, o: int, step: int, recent: deque[float]) -> None:
        """The loss has not moved by more than ``PLATEAU_RANGE`` (relative to its size,
        absolute below 1) for ``PLATEAU_STEPS`` steps; the episode ends when it moves by
        100× that (hysteresis: rounding noise does not start a new one)."""
        if len(recent) < PLATEAU_STEPS:
            return
        spread = max(recent) - min(recent)
        size = max(1.0, abs(recent[-1]))
        if spread < PLATEAU_RANGE * size:
            self._flat.add(o)
            self.sink.report(
                finding(
                    checkids.LOSS_PLATEAU,
                    step,
                    f"the loss has not moved for {PLATEAU_STEPS} steps (range {num(spread)}).",
                    "check that parameters receive gradients and the learning rate is not 0, or "
                    "stop: training has converged.",
                    optimizer=o,
                    details={"range": spread, "loss": recent[-1]},
                )
            )
        elif o in self._flat and spread >= 100 * PLATEAU_RANGE * size:
            self._flat.discard(o)
            self.sink.clear(checkids.LOSS_PLATEAU, None, o)


def median(values: Iterable[float]) -> float:
    """``statistics.median`` (the same value: the middle one, or the mean of the middle
    two), without its checks; called for every loss and every batch scale."""
    ordered = sorted(values)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[half]
    return (ordered[half - 1] + ordered[half]) / 2


def mode_dependent_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Dropout/normalisation modules whose eval mode matters for training: their own
    parameters are trainable, or (parameter-free ones) a trainable parameter comes before
    them in their parent (registration order, the forward order of an ``nn.Sequential``),
    so the gradient that trains it passes through them. A parameter-free layer before
    every trainable parameter of its parent (a frozen backbone's norm layers and dropout
    kept in eval() for feature extraction) changes only the features, not the training."""
    out: list[tuple[str, nn.Module]] = []
    parents = {name: mod for name, mod in model.named_modules()}
    for name, mod in model.named_modules():
        if not isinstance(mod, _MODE_DEPENDENT):
            continue
        own = list(mod.parameters(recurse=False))
        if own:
            relevant = any(p.requires_grad for p in own)
        else:
            relevant = _trainable_before(parents.get(name.rpartition(".")[0], model), mod)
        if relevant:
            out.append((name, mod))
    return out


def _trainable_before(parent: nn.Module, child: nn.Module) -> bool:
    """Whether ``parent`` has a trainable parameter of its own or in a child registered
    before ``child``."""
    if any(p.requires_grad for p in parent.parameters(recurse=False)):
        return True
    for sibling in parent.children():
        if sibling is child:
            return False
        if any(p.requires_grad for p in sibling.parameters()):
            return True
    return False


def all_training(root: nn.Module, modules: list[tuple[str, nn.Module]]) -> bool:
    """Whether the model and its relevant dropout/norm layers are all in train() mode."""
    return root.training and all(mod.training for _, mod in modules)


def eval_mode(
    sink: FindingSink, step: int, root: nn.Module, modules: list[tuple[str, nn.Module]]
) -> Action:
    """``eval-mode-training``. Invariant: what trains runs as it will be trained — a model
    (or a dropout layer on the gradient's path) in eval() while it trains has dropout off:
    a warning. Normalisation layers alone in eval() under a training model keep their
    running statistics frozen, a common fine-tuning choice: info, named as such."""
    in_eval = [(name, mod) for name, mod in modules if not mod.training]
    if root.training and in_eval and not any(isinstance(m, _DROPOUT) for _, m in in_eval):
        names = [name for name, _ in in_eval]
        batch = all(isinstance(m, nn.modules.batchnorm._BatchNorm) for _, m in in_eval)
        return sink.report(
            finding(
                checkids.EVAL_MODE_TRAINING,
                step,
                f"{'BatchNorm' if batch else 'normalisation'} "
                f"{'layer' if len(names) == 1 else 'layers'} {listing(names)} "
                f"{'is' if len(names) == 1 else 'are'} in eval mode while the model trains: "
                f"{'its' if len(names) == 1 else 'their'} running statistics are frozen (a "
                "common fine-tuning choice).",
                "nothing to do if meant; otherwise call model.train() after any .eval() on "
                "these layers.",
                severity="info",
                details={"modules_in_eval": names[:20], "root_training": True},
            )
        )
    if not root.training or in_eval:
        dropout = [name for name, m in in_eval if isinstance(m, _DROPOUT)]
        return sink.report(
            finding(
                checkids.EVAL_MODE_TRAINING,
                step,
                (
                    "the model is in eval() mode while it trains, so dropout is off and "
                    "batch-norm statistics are frozen."
                    if not root.training
                    else f"{counted(len(dropout), 'dropout layer')} ({listing(dropout)}) "
                    f"{'is' if len(dropout) == 1 else 'are'} in eval() mode while the model "
                    "trains, so dropout is off there."
                ),
                "call model.train() before the training loop (and after every validation that "
                "calls model.eval()).",
                details={
                    "modules_in_eval": [name for name, _ in in_eval][:20],
                    "root_training": root.training,
                },
            )
        )
    return "none"  # the engine clears the finding once every watched model trains
