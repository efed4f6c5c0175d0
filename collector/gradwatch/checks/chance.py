"""``loss-at-chance``: a classification loss that stays at ``ln C`` — the value of guessing
uniformly among ``C`` classes — long after training started, while the parameters change.

The classification losses (``F.cross_entropy``, ``nn.CrossEntropyLoss``, ``F.nll_loss``,
``nn.NLLLoss``) are seen by :mod:`gradwatch.hooks.classloss`, which reads only shapes and
arguments: ``C``, the reduction, label smoothing and whether the targets are class indices.
The loss values are the ones gradwatch already records per step (the backward root), read
on the I/O thread with the rest of each collected row: no extra synchronisation.

It holds when, after ``WARMUP`` collected steps, each of the last ``WINDOW`` steps has a
loss and an update (update norms > 0), the mean of every run of ``CHUNK`` consecutive losses
among them stays above (1 − ``BAND``) × ln C, and the mean of each half of them lies within
``BAND`` × ln C of ln C, the second no more than ``BAND`` / 2 × ln C below the first (level:
a slow learner's loss falling through ln C from above declines across the window). When
every backward pass of the run starts at the classification loss itself (its root's autograd
node is the loss's own, no other term added, :class:`LossKind`'s ``own``), a half may lie
anywhere above the band's floor: such a loss above ln C is the loss of a model that learns
nothing of the labels (below). Inputs
and labels shuffled apart (two independent permutations), or labels taken from another
batch, give exactly this: nothing links an input to its label, so no model gets below the
label prior's entropy (ln C on balanced data) — what a model learns of labels without
information only puts its loss *above* ln C (the noise it fits, by as much as its learning
rate lets it). So the band is one-sided per chunk: a chunk below it is learning; a chunk
above it is not.

Quiet on: runs shorter than ``WARMUP + WINDOW`` steps; every step before that; a loss that
goes below the band (it learns), a half of it whose mean leaves the band, or a decline
across the window (a slow learner passing ln C); imbalanced data whose loss sits at
the entropy of the label prior when that is more than the band below ln C; label smoothing
whose floor (the entropy of the smoothed target) lies within twice the band of ln C; soft
(probability) targets, sums instead of means, and runs whose losses disagree on ``C``;
contrastive losses whose classes are the batch's own rows (logits N x N or N x (N-1) on
every call; a classifier trained with a batch size of C or C + 1 on every step is read as
one, and not checked).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from gradwatch.checks.findings import FindingSink, finding
from gradwatch.checks.fmt import num
from gradwatch.core import checkids

ID = checkids.LOSS_AT_CHANCE
WARMUP = 100  # collected steps before the window starts
WINDOW = 200  # collected steps the loss must stay at ln C
CHUNK = 10  # losses per mean (mini-batch noise averages out within one)
BAND = 0.05  # |mean − ln C| < BAND × ln C
#: the autograd node of ``F.cross_entropy``'s and ``F.nll_loss``'s output (mean or sum)
OWN_ROOT = "NllLossBackward0"


def smoothing_floor(classes: int, smoothing: float) -> float:
    """The lowest mean cross-entropy reachable with label smoothing ``smoothing``: the
    entropy of the smoothed one-hot target."""
    if smoothing <= 0:
        return 0.0
    rest = smoothing / classes
    top = 1.0 - smoothing + rest
    return -(top * math.log(top)) - (classes - 1) * rest * math.log(rest)


@dataclass
class LossKind:
    """What the classification loss calls of a run have in common (``classes`` None
    until the first, 0 once they disagree or cannot be compared with ln C)."""

    classes: int | None = None
    smoothing: float = 0.0
    #: a call took softmax probabilities as its input (a softmax before the loss, which
    #: applies log_softmax itself): the loss can barely fall below ln C
    probabilities: bool = False
    #: a call whose classes are not the batch's own rows (see ``note``)
    fixed_classes: bool = False
    #: backward passes whose root is a classification loss's own output (its autograd node
    #: is the loss's, ``NllLossBackward0``: ``cross_entropy(...).backward()``), and the others
    #: (a sum with other terms, a scaled or weighted loss, another loss)
    own_roots: int = 0
    other_roots: int = 0

    def root(self, node: str | None) -> None:
        """One backward pass, by the type name of its root's autograd node."""
        if node == OWN_ROOT:
            self.own_roots += 1
        else:
            self.other_roots += 1

    @property
    def own(self) -> bool:
        """Every backward pass so far started at a classification loss itself: the step's
        loss *is* that loss, so a value above ln C is its own (nothing else added it)."""
        return self.own_roots > 0 and self.other_roots == 0

    def note(
        self,
        classes: int,
        smoothing: float,
        mean: bool,
        soft: bool,
        probabilities: bool = False,
        in_batch: bool = False,
    ) -> None:
        """One classification loss call of a training step. ``in_batch``: its logits are an
        N x N or N x (N-1) similarity of the batch's rows (a contrastive loss: SimCLR's
        InfoNCE, CLIP), whose "classes" are the other samples of the same batch and whose
        labels are positions the loss builds itself: they cannot be shuffled apart from
        the inputs, so a loss at ln C there is slow learning (``loss-plateau``'s
        business), not missing information. While every call is such, the check is off."""
        self.probabilities = self.probabilities or probabilities
        self.fixed_classes = self.fixed_classes or not in_batch
        comparable = classes >= 2 and mean and not soft
        if not comparable or (self.classes is not None and self.classes != classes):
            self.classes = 0
            return
        if self.classes is None:
            self.classes = classes
        self.smoothing = max(self.smoothing, smoothing)

    @property
    def level(self) -> float | None:
        """ln C when the run's classification loss can be compared with it, else None."""
        c = self.classes
        if not c or not self.fixed_classes:
            return None
        chance = math.log(c)
        if smoothing_floor(c, self.smoothing) >= (1 - 2 * BAND) * chance:
            return None  # smoothing so strong that ln C is about the best reachable loss
        return chance


@dataclass
class _Losses:
    rows: int = 0
    recent: deque[float | None] = field(default_factory=lambda: deque(maxlen=WINDOW))
    #: each closed run of CHUNK losses of ``recent``: its mean, or None where one of them
    #: is missing or not finite (the window cannot hold while it is in the window)
    chunks: deque[float | None] = field(default_factory=lambda: deque(maxlen=WINDOW // CHUNK))
    since: int | None = None  # first step of the window that held


def _chunk_mean(recent: deque[float | None]) -> float | None:
    """The mean of the last ``CHUNK`` losses of ``recent`` (summed in order, as a window's
    chunk is), None when one of them is missing or not finite."""
    chunk = [recent[i] for i in range(len(recent) - CHUNK, len(recent))]
    if any(x is None or not math.isfinite(x) for x in chunk):
        return None
    return sum(chunk) / CHUNK  # type: ignore[arg-type]


class LossAtChance:
    """``loss-at-chance`` for every optimizer of one run."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        self.kind = LossKind()
        self._losses: dict[int, _Losses] = {}

    def observe_rows(
        self, o: int, steps: list[int], losses: list[float | None], updated: list[bool]
    ) -> None:
        """Feed a window of optimizer ``o``'s collected steps: the loss (None: none
        recorded) and whether any parameter changed."""
        chance = self.kind.level
        if chance is None:
            return
        state = self._losses.setdefault(o, _Losses())
        for step, loss, moved in zip(steps, losses, updated, strict=True):
            state.rows += 1
            state.recent.append(loss if moved and loss is not None else None)
            if state.rows % CHUNK == 0:
                state.chunks.append(_chunk_mean(state.recent))
                if state.rows >= WARMUP + WINDOW:
                    self._judge(o, step, chance, state)
        self.sink.flush()

    def _judge(self, o: int, step: int, chance: float, state: _Losses) -> None:
        # the chunk means decide first: a run that learns has one well below ln C, and
        # the whole window is read only while every chunk stays near or above it
        means = state.chunks
        holds = None not in means
        worst = max(0.0, *(chance - m for m in means)) if holds else 0.0  # type: ignore[operator]
        holds = holds and worst < BAND * chance
        values = list(state.recent) if holds else []
        if holds:
            half = len(values) // 2
            first, last = (
                sum(h) / len(h)  # type: ignore[arg-type]
                for h in (values[:half], values[half:])
            )
            if self.kind.own:  # the loss is the classification loss alone: above is stuck
                level = all(m > (1 - BAND) * chance for m in (first, last))
            else:  # other terms may lift it: only a level at ln C itself tells
                level = all(abs(m - chance) < BAND * chance for m in (first, last))
            holds = worst < BAND * chance and level and first - last < BAND / 2 * chance
        if not holds:
            if state.since is not None:
                state.since = None
                self.sink.clear(ID, None, o)
            return
        if state.since is None:
            state.since = step - WINDOW + 1
        if any(other.since is not None for k, other in self._losses.items() if k != o):
            return  # the run's loss, already told under the optimizer before (a new one a round)
        mean = sum(x for x in values if x is not None) / len(values)
        classes = self.kind.classes
        where = "above" if mean > (1 + BAND) * chance else "at"
        stayed = (
            f"stayed {where} ln({classes}) = {chance:.2f}, the value of guessing uniformly "
            f"among {classes} classes, for {WINDOW} steps while the parameters change (mean "
            f"{num(mean, 4)})"
        )
        message, hint = (
            (
                "the classification loss is given softmax probabilities instead of logits "
                "(it applies log_softmax itself, so every input lies in [0, 1] and the loss "
                f"can barely fall below ln {classes}): it has {stayed}.",
                "remove the Softmax before the loss and pass the logits (or pair log_softmax "
                "with nll_loss).",
            )
            if self.kind.probabilities
            else (
                f"the loss has {stayed}: are inputs and labels paired (shuffled apart, or "
                "labels from another batch)?",
                "index inputs and labels with the same permutation (or use one DataLoader over "
                "a dataset that returns (input, label) pairs), and check the labels come from "
                "the same batch as the inputs.",
            )
        )
        self.sink.report(
            finding(
                ID,
                step,
                message,
                hint,
                optimizer=o,
                details={
                    "classes": classes,
                    "chance_loss": chance,
                    "mean_loss": mean,
                    "largest_shortfall": worst,
                    "since": state.since,
                    "steps": WINDOW,
                    "softmax_input": self.kind.probabilities,
                },
            )
        )
