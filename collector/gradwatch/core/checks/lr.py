"""The learning-rate checks (implemented in :mod:`gradwatch.checks.lr` and
:mod:`gradwatch.checks.lrscale`), declared for the check registry
(:mod:`gradwatch.core.registry`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.registry import Cause, Check, Family

__all__ = [
    "LR_COLLAPSE",
    "LR_JUMP",
    "LR_TOO_LARGE",
]

LR_JUMP: Final = "lr-jump"
LR_COLLAPSE: Final = "lr-collapse"
LR_TOO_LARGE: Final = "lr-too-large"

FAMILY: Final = Family(
    __name__,
    "Learning rate",
    (
        Check(LR_JUMP, "warning", "after-update",
           "A param group's learning rate rose at one step far above any value it had before "
           "(0.01 → 10,000); the finding names the group, the values and the scheduler.",
           "> {lr.JUMP_FACTOR:g}× its earlier peak, after {lr.JUMP_MIN_STEPS} steps with a "
           "positive learning rate",
           "warm-up, OneCycle, cyclic schedules and warm restarts (they never pass their own "
           "earlier peak by that much)",
           cause=Cause(
                "learning-rate jump", 10, frozenset({"symptom", "lr-harm"}),
                also=frozenset({LR_TOO_LARGE}), window=50, lead=1,
            ),
           row="update"),
        Check(LR_COLLAPSE, "warning", "after-update",
           "A param group's learning rate fell to about zero long before the run ends (a "
           "scheduler sized in epochs stepped every batch); names the group, the values and the "
           "scheduler.",
           "below {lr.COLLAPSE_FACTOR:g}× its peak for {lr.COLLAPSE_MIN_STEPS} steps and for "
           "{lr.COLLAPSE_SHARE:g} of the steps before it fell there; or, earlier, at that level "
           "when tensors of the group stop changing at all (`param-not-updated`, then its "
           "consequence)",
           "step, cosine, linear and exponential decay over the run, OneCycle, "
           "ReduceLROnPlateau, constant learning rates",
           cause=Cause("learning-rate collapse", 20, frozenset({"stalled"}), lead=1),
           row="update"),
        Check(LR_TOO_LARGE, "warning", "after-update",
           "Under Adam and its family (AdamW, NAdam, RAdam, Adamax, SparseAdam, Lion) and "
           "RMSprop every weight moves by about the learning rate at each step, whatever the "
           "gradient's scale; "
           "a param group's rate far above the typical size of its weights overwrites them within "
           "a few steps, which gradient clipping and Adam's normalisation hide from the other "
           "checks. The finding names the group, the rate (or the peak its scheduler was built "
           "for), the weights' size and the optimizer. When the loss then diverges "
           "(`loss-diverging`) or turns non-finite, the rate is shown to break training: the "
           "finding is repeated as an `error` (same incident), so `--fail-on error` fails the run. "
           "Adadelta sizes its steps itself and its rate multiplies them (natural value 1): above "
           "1 each update outgrows the ones before, so its rate is compared with 1. Under any "
           "other optimizer (SGD, whose step a clipped gradient bounds; DP-SGD) the rate is "
           "named when the loss diverges after an optimizer whose very first update was at "
           "least as large as the weights it changed (the size at which `update-ratio` calls an "
           "update a rewrite) and 10× the gradient that made it or more: the rate amplified an "
           "ordinary gradient into a step that rewrote the weights (an "
           "error, the incident's cause; a first step made huge by its gradient, as an "
           "AMP-scaled loss stepped without its scaler, is not the rate's).",
           "rate > {lrscale.FACTOR:g}× the median RMS, before the first update, of the group's "
           "non-zero trainable weight matrices; checked at every collected step and against the "
           "scheduler's `initial_lr`/`max_lr` at the first; one finding per optimizer; error: a "
           "divergence or non-finite loss after it",
           "from-scratch rates (1e-4…1e-2 on usual initialisations), fine-tuning rates, warm-up, "
           "zero-initialised matrices, biases and norm weights (no size to compare with), SGD and "
           "other optimizers whose step scales with the gradient (a large SGD rate on a small net "
           "is normal), Adagrad (its steps shrink as lr/√t), D-Adaptation/Prodigy (their rate is "
           "a multiplier); Adadelta at a rate "
            "up to "
           "{lrscale.FACTOR:g}",
           cause=Cause(
                "learning rate too large", 30, frozenset({"symptom", "stalled", "lr-harm"}), lead=1
            ),
           row="update"),
    ),
    constants={
        "lr": "gradwatch.checks.lr",
        "lrscale": "gradwatch.checks.lrscale",
    },
)  # fmt: skip
