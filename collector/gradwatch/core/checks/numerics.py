"""The numerics checks (implemented in :mod:`gradwatch.checks.numerics`, ``explode``, ``ratio``
and ``amp``), declared for the check registry (:mod:`gradwatch.core.registry`), with the incident
rules of the cause kinds derived from numeric findings (see
:func:`gradwatch.core.incidents.kind_of`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.checks.data import LOSS_DIVERGING
from gradwatch.core.registry import Cause, Check, Family

__all__ = [
    "AMP_OVERFLOW",
    "EXPLODING_GRAD",
    "NONFINITE_GRAD",
    "NONFINITE_LOSS",
    "NONFINITE_PARAM",
    "UPDATE_RATIO",
    "VANISHING_GRAD",
]

NONFINITE_LOSS: Final = "nonfinite-loss"
NONFINITE_GRAD: Final = "nonfinite-grad"
NONFINITE_PARAM: Final = "nonfinite-param"
AMP_OVERFLOW: Final = "amp-overflow"
EXPLODING_GRAD: Final = "exploding-grad"
VANISHING_GRAD: Final = "vanishing-grad"
UPDATE_RATIO: Final = "update-ratio"

FAMILY: Final = Family(
    __name__,
    "Numerics",
    (
        Check(NONFINITE_LOSS, "error", "before-update",
           "The loss is NaN or ±Inf; NaN provenance names the module and operation that made "
           "the first non-finite value.",
           "any non-finite loss",
           "steps a GradScaler skipped (that is `amp-overflow`)",
           signs=frozenset({"nonfinite", "symptom"}),
           row="values"),
        Check(NONFINITE_GRAD, "error", "before-update",
           "NaN or ±Inf in gradients: the first step, the first tensor in forward order, and "
           "per-tensor counts.",
           "any non-finite gradient element",
           "overflow steps skipped by a GradScaler (`amp-overflow`)",
           signs=frozenset({"nonfinite", "symptom"}),
           row="values"),
        Check(NONFINITE_PARAM, "error", "after-update",
           "NaN or ±Inf in parameters after `step()`.",
           "any non-finite parameter element",
           "nothing",
           signs=frozenset({"nonfinite", "symptom"}),
           row="update"),
        Check(AMP_OVERFLOW, "info", "before-update",
           "A GradScaler skipped steps because of inf/NaN gradients: `info` per skip, `warning` "
           "when persistent, `error` when the scale collapses.",
           "warning after {amp.CONSECUTIVE_WARN} consecutive skips or more than "
           "{amp.RATE_WARN:.0%} of the last {amp.RATE_WINDOW} steps; error when the scale is ≤ 1",
           "the occasional skip while the scale settles",
           signs=frozenset({"symptom"})),
        Check(EXPLODING_GRAD, "warning", "before-update",
           "The whole gradient norm (all tensors together) jumped far above its own recent "
           "level, or is absurdly large (also a norm that overflows float32 while every element "
           "is finite); one finding per episode lists the tensors that jumped. Growth is judged "
           "from at least a floor tied to the model's own scale (1% of ‖θ‖ before the first "
           "update): a gradient below 10× that floor (10% of ‖θ‖) would move the weights by "
           "under a tenth of their size even at a learning rate of 1, so no relative rise of it "
           "is an explosion. A one-off jump is harmful only through the update it makes: once "
           "the step's update is measured (after the update, the usual path), a jump is an "
           "explosion only when that step moved the weights (‖Δθ‖/‖θ‖ of the whole) "
           "4× as far as the run's usual step and by at least 1% of their norm "
           "more, or its input batch is an outlier "
           "on another scale. Adam, RMSprop and Adagrad divide a spike by their running RMS, so "
           "a spike under them moves the weights by about the usual step; plain SGD passes it on "
           "in full. Persistent growth, an absurd RMS and an overflowing norm need no such "
           "evidence; a raise/skip/checkpoint policy acts before the update, on the gradient "
           "alone.",
           "after {explode.MIN_HISTORY} steps: > {explode.EXPLODE_FACTOR:g}× its rolling median, "
           "> {explode.EXPLODE_MADS:g} robust deviations of the log-norm above it and > "
           "{explode.SUDDEN:g}× the median of the last {explode.RECENT} steps; before that "
           "> {explode.EARLY_FACTOR:g}× the median so far; or > {explode.GROWTH:g}× the previous "
           "step's at {explode.GROWTH_STEPS} steps in a row — each only above the floor, and a "
           "one-off jump (median or early rule) only with its update ‖Δθ‖/‖θ‖ ≥ "
           "{explode.SUDDEN:g}× the usual one and ≥ the usual one + {explode.FLOOR_SHARE:g} "
           "(when measured), or with an outlier input batch; or RMS > "
           "{explode.RMS_EXPLODE:g}; the episode ends after {explode.CALM_STEPS} calm steps",
           "noisy mini-batches; tiny layers, biases before BatchNorm and LayerNorm gradients "
           "growing to a new normal level (a slow drift is not a jump); clipped runs; a tiny "
           "gradient rising many-fold while small against the weights (REINFORCE's early "
           "policy gradient, a GAN's oscillation); gradient spikes that an adaptive optimizer "
           "absorbs (policy-gradient/actor-critic/PPO return spikes, a GAN discriminator's "
           "oscillation, a ResNet's noisy steps under Adam: the update stays under "
           "1% of ‖θ‖ above its usual size)",
           cause=Cause("exploding gradients", 180, frozenset({"symptom"}), window=20),
           signs=frozenset({"symptom"}),
           row="values"),
        Check(VANISHING_GRAD, "warning", "after-update",
           "Gradients too small to train *and* weights that stand still: a vanishing gradient "
           "is harmful only when the parameters stop moving, so each step needs two pieces of "
           "evidence — the gradient (a tensor's RMS, or the first weight matrix's norm against "
           "the last one's) and the update it made (‖Δθ‖/‖θ‖ after the update tiny: a slow "
           "layer that still moves is training). Adam, RMSprop and "
           "Adagrad rescale tiny gradients and keep the weights moving, so a tiny gradient "
           "alone is no finding. Judged after the update (on gradwatch's writer thread). One "
           "finding per episode lists the tensors.",
           "RMS < {numerics.RMS_VANISH:g}, or first/last layer gradient ratio < "
           "{numerics.FIRST_LAST_RATIO:g}, with ‖Δθ‖ ≤ {numerics.STILL:g}×‖θ‖ at each of "
           "{numerics.VANISH_STEPS} steps in a row; the episode ends after "
           "{numerics.VANISH_STEPS} steps without",
           "tensors whose RMS is below {numerics.STRUCTURAL_ZERO:g}× the largest (zero up to "
           "rounding); a loss fallen to {numerics.CONVERGED:g}× the run's first or less (a "
           "memorised batch, a converged fit: every gradient shrinks with the loss); tiny "
           "gradients that an adaptive optimizer rescales (a GAN generator's first steps, a "
           "deep net's first layers under Adam); conditional computation (mixture-of-experts "
           "experts the gate rarely picks: a real gradient now and then breaks the streak, "
           "and Adam keeps them moving); a start-of-training transient shorter than "
           "{numerics.VANISH_STEPS} steps",
           signs=frozenset({"stalled", "faded", "lr-harm"}),
           row="update"),
        Check(UPDATE_RATIO, "warning", "after-update",
           "Updates far too large for the weights they change, ‖Δθ‖/‖θ before the update‖, step "
           "after step (a learning rate far too high); one finding per level and episode. When "
           "the streak began at the optimizer's first update, no gradient grown in training made "
           "the updates so large: the finding names the learning rate, and incidents read it "
           "under `lr-too-large`'s rule (any optimizer, SGD included), so the gradients that "
           "explode once the weights are rewritten are its consequences.",
           "warning above {ratio.LEVELS[0][1]:g}× for {ratio.LEVELS[0][2]} steps; error above "
           "{ratio.LEVELS[1][1]:g}× for {ratio.LEVELS[1][2]} steps; the episode ends after "
           "{ratio.CALM_STEPS} calm steps",
           "small updates (fine-tuning, deep nets, decayed learning rates, embeddings whose rows "
           "move only when their tokens appear): too small is `lr-collapse` or "
           "`param-not-updated`",
           signs=frozenset({"symptom", "stalled"}),
           row="update"),
    ),
    constants={
        "numerics": "gradwatch.checks.numerics",
        "explode": "gradwatch.checks.explode",
        "ratio": "gradwatch.checks.ratio",
        "amp": "gradwatch.checks.amp",
    },
    derived={
        # a non-finite finding whose NaN provenance traced the value to the input batch, or a
        # symptom at the step of an outlier input batch (details.batch_outlier)
        "input-batch": Cause("input batch", 40, frozenset({"symptom"}), window=20),
        # a non-finite finding whose NaN provenance traced the value to an operation
        "nan-origin": Cause(
            "operation found by NaN provenance", 50, frozenset({"symptom"}), window=20
        ),
        # no cause upstream was recorded: the first numeric symptom stands for the others
        "nonfinite": Cause(
            "NaN",
            170,
            frozenset({"nonfinite"}),
            also=frozenset({EXPLODING_GRAD, LOSS_DIVERGING, UPDATE_RATIO}),
            window=20,
        ),
    },
)  # fmt: skip
