"""The checks of the loss and the data (implemented in :mod:`gradwatch.checks.loss`,
``repeated`` and ``chance``), declared for the check registry (:mod:`gradwatch.core.registry`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.registry import Cause, Check, Family

__all__ = [
    "EVAL_MODE_TRAINING",
    "LOSS_AT_CHANCE",
    "LOSS_DIVERGING",
    "LOSS_PLATEAU",
    "LOSS_SHAPE_MISMATCH",
    "REPEATED_BATCH",
]

LOSS_SHAPE_MISMATCH: Final = "loss-shape-mismatch"
REPEATED_BATCH: Final = "repeated-batch"
LOSS_AT_CHANCE: Final = "loss-at-chance"
LOSS_DIVERGING: Final = "loss-diverging"
LOSS_PLATEAU: Final = "loss-plateau"
EVAL_MODE_TRAINING: Final = "eval-mode-training"

FAMILY: Final = Family(
    __name__,
    "Loss and data",
    (
        Check(LOSS_SHAPE_MISMATCH, "error", "before-update",
           "An element-wise loss (MSE, L1, SmoothL1, Huber, BCE…) got input and target of "
           "different shapes that broadcast, e.g. `(N,1)` vs `(N,)`.",
           "any broadcasting shape pair at the loss call",
           "equal shapes; losses that reduce over classes (cross-entropy)",
           cause=Cause("loss shape mismatch", 110, frozenset({"stalled", "no-info"}))),
        Check(REPEATED_BATCH, "warning", "after-update",
           "The model got the same input batch (the same batch checksum) on consecutive steps, "
           "and the DataLoaders say why: a new iterator made at about every step and left after "
           "its first batch (`next(iter(loader))` in the loop, `shuffle=False`); one batch "
           "drawn before the loop from a loader of several batches and none since; or a loader "
           "walked a batch per step while the model's input stays the same (what the loop draws "
           "never reaches the model, or every sample of the dataset is identical). A step of "
           "several forwards is also checked forward by forward: one input that repeats while "
           "the others change (a GAN discriminator's real batch next to fresh fakes). When the "
           "input changes anyway (noise, an adversarial perturbation or mixup added to a kept "
           "batch), the labels tell: a classification loss given, step after step, the very "
           "label tensor a DataLoader yielded for an earlier step while the loop draws a new "
           "batch at every step; and so does the input itself when the model is given it "
           "beside another tensor that changes (a diffusion model's kept image beside fresh "
           "noise).",
           "{repeated.REPEAT_STEPS} collected steps in a row with one checksum (asked again at "
           "twice as many); a loader of 2 or more batches (or of unknown length); a batch drawn "
           "once from an iterator the program still held when the repeat began: twice that, and "
           "twice the longest repeat that ended before (a batch reused on purpose for a few "
           "updates ends at its own length); one finding "
           "until {repeated.REPEAT_STEPS} steps in a row go without the repeated batch; labels: "
           "the same CPU tensor of at least {loaders.MIN_LABELS} elements (its storage) drawn "
           "once and given to `cross_entropy`/`nll_loss` as labels, or to the model beside "
           "another tensor, on {repeated.REPEAT_STEPS} consecutive steps while a loader drew "
           "at each of them and none of the batches drawn reached the loss (or the model)",
           "full-batch training on a fixed tensor (no DataLoader), loaders of one batch (epochs "
           "of one batch), loaders walked to their end (concatenated into one tensor, a full "
           "validation pass); batches drawn with gradients disabled; a batch drawn before "
           "`watch()` in a script that calls it by hand (`gradwatch run` sees it); labels the "
           "program builds itself (rotation targets, `arange`) or a conditioning tensor it made "
           "once, prefetched batches (each used once), a sample drawn once and shown to the "
           "model beside each step's batch, a batch reused for a few updates from the iterator "
           "the loop holds (a GAN's critic steps on each real batch), labels and inputs moved "
           "to a GPU (a new tensor at each step: not followed)",
           cause=Cause("repeated input batch", 100, frozenset({"stalled"}))),
        Check(LOSS_AT_CHANCE, "warning", "after-update",
           "A classification loss (`cross_entropy`, `nll_loss`, their modules) stays at ln C, "
           "the loss of guessing uniformly among its C classes, while the parameters change: "
           "inputs and labels are not paired (shuffled with two permutations, labels from "
           "another batch), or the loss is given softmax probabilities instead of logits (a "
           "Softmax before `CrossEntropyLoss`: every input lies in [0, 1] and the loss can "
           "barely leave ln C), which the finding then names as the cause (the input's autograd "
           "node is a softmax). C is read from the logits' shape; the loss is the one gradwatch "
           "records per step. A loss call made while every watched model is in eval mode (a "
           "test pass with gradients on) is no training loss: its reduction or class count "
           "does not count.",
           "after {chance.WARMUP} steps, every mean of {chance.CHUNK} losses of the last "
           "{chance.WINDOW} steps above ln C less {chance.BAND:.0%} (above it by any amount: a "
           "model fitting labels without information only rises above ln C), the mean of each "
           "half of the window within {chance.BAND:.0%} of ln C — or anywhere above ln C less "
           "{chance.BAND:.0%} when every backward pass of the run starts at the classification "
           "loss's own output (nothing else in the loss could lift it) — and the second half no "
           "more than half the band below the first (level), each step with an update; one "
           "finding per run (a new optimizer each round is the same loss)",
           "shorter runs and the first {chance.WARMUP} steps; a loss that goes below the band "
           "(it learns), or declines through ln C across the window (a slow learner); "
           "imbalanced labels whose loss sits at the prior's entropy more than "
           "{chance.BAND:.0%} below ln C; label smoothing whose floor is within twice the band "
           "of ln C; soft targets, `reduction='sum'`, losses of several class counts; steps "
           "without an update; contrastive losses whose classes are the batch's own rows "
           "(N x N or N x (N-1) logits on every call, as SimCLR's and CLIP's: labels the loss "
           "builds itself cannot be unpaired; a classifier whose batch size is C or C + 1 on "
           "every step reads the same and is not checked)",
           signs=frozenset({"no-info"})),
        Check(LOSS_DIVERGING, "warning", "after-update",
           "The model gets worse at its task because of the optimisation: the loss blew up, or "
           "it rose far above its best level and stayed there while the updates threw the "
           "weights away; one finding per episode. A rise alone is not that evidence: the loss "
           "of a changing objective moves while the weights move at their usual pace (RL value "
           "targets and episode sums grow as the policy improves, a curriculum's data gets "
           "harder, every meta-learning step is a new task). A rate that breaks training, unlike "
           "a changing objective, moves the weights by many times their own size within a few "
           "dozen steps (healthy updates are a small fraction of the weights: `update-ratio`).",
           "after {loss.DIVERGE_MIN_STEPS} steps: median of {loss.SMOOTH} losses ≥ "
           "{loss.DIVERGE_FIRST_FACTOR:g}× the first loss (at once), or ≥ "
           "{loss.DIVERGE_FACTOR:g}× its best (the lowest such median) and "
           "{loss.NOISE_MADS:g} MADs above it for {loss.DIVERGE_PERSIST} losses in a row while "
           "the update norms of those steps add up to ≥ {loss.RUNAWAY:g}× the weights' norm at "
           "their start (or are non-finite)",
           "noisy mini-batch losses within {loss.NOISE_MADS:g} MADs; bursts of heavy-tailed "
           "losses (polynomial features, outlier-rich batches) that settle within "
           "{loss.DIVERGE_PERSIST} losses; a loss that rises with its objective while the weights "
           "keep their pace (actor-critic and DQN returns, a curriculum of rising noise, fresh "
           "tasks after fine-tuning on one: the corpus's correct programs move their weights by "
           "at most 0.84× their norm in {loss.DIVERGE_PERSIST} steps); a divergence that has not "
           "yet moved the weights is found at {loss.DIVERGE_FIRST_FACTOR:g}× the first loss or "
           "when the loss turns non-finite (`nonfinite-loss`)",
           signs=frozenset({"symptom", "stalled"}),
           row="update"),
        Check(LOSS_PLATEAU, "info", "after-update",
           "The loss stopped changing at all.",
           "range < {loss.PLATEAU_RANGE:g} of the loss's size (absolute below 1) over "
           "{loss.PLATEAU_STEPS} steps",
           "losses that still move",
           signs=frozenset({"stalled", "faded", "no-info"}),
           row="update"),
        Check(EVAL_MODE_TRAINING, "warning", "before-update",
           "The model, or a dropout layer on the gradient's path, is in `eval()` while backward "
           "and step run: dropout is off. Normalisation layers alone in eval under a training "
           "model (frozen running statistics, a common fine-tuning choice) are `info`, named so.",
           "the root module in eval, or a relevant dropout layer in eval, at a step; one finding "
           "until every watched model trains again (a generator in eval next to a discriminator "
           "in train is one finding)",
           "BatchNorm kept in eval while the rest trains (info); frozen norm layers without "
           "trainable parameters, and parameter-free norm/dropout layers before every trainable "
           "parameter of their parent (a frozen backbone kept in eval() for feature extraction)",
           cause=Cause("model in eval mode", 190, frozenset({"faded"})),
           confirms=(EVAL_MODE_TRAINING,)),
    ),
    constants={
        "loss": "gradwatch.checks.loss",
        "repeated": "gradwatch.checks.repeated",
        "chance": "gradwatch.checks.chance",
        "loaders": "gradwatch.hooks.loaders",
    },
)  # fmt: skip
