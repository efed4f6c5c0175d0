"""The parameter-coverage checks (implemented in :mod:`gradwatch.checks.coverage`, with
``gradwatch.hooks.connectivity`` for parameters outside every optimizer), declared for the check
registry (:mod:`gradwatch.core.registry`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.registry import Cause, Check, Family

__all__ = [
    "FROZEN_PARAM_CHANGED",
    "FROZEN_PARAM_IN_OPTIMIZER",
    "PARAM_MUTATED_OUTSIDE_STEP",
    "PARAM_NOT_IN_OPTIMIZER",
    "PARAM_NOT_UPDATED",
    "PARAM_NO_GRAD",
]

PARAM_NO_GRAD: Final = "param-no-grad"
PARAM_NOT_IN_OPTIMIZER: Final = "param-not-in-optimizer"
FROZEN_PARAM_IN_OPTIMIZER: Final = "frozen-param-in-optimizer"
PARAM_NOT_UPDATED: Final = "param-not-updated"
FROZEN_PARAM_CHANGED: Final = "frozen-param-changed"
PARAM_MUTATED_OUTSIDE_STEP: Final = "param-mutated-outside-step"

FAMILY: Final = Family(
    __name__,
    "Parameter coverage",
    (
        Check(PARAM_NO_GRAD, "warning", "before-update",
           "A trainable parameter is cut off from the loss: its module runs in the training "
           "forward, yet it has never had a non-zero gradient (a graph break: `detach`, "
           "`.item()`, `torch.tensor(t)`, `no_grad`). A gradient that exists but is exactly "
           "zero is named with both causes (cut off, or nothing flows back: dead activations, a "
           "zero layer after it, underflow); but a module's `bias` with an exactly zero "
           "gradient while the rest of its module gets one is not cut off: the loss does not "
           "change under a constant shift of that output (a difference of means, as in a "
           "Wasserstein or relativistic critic's last layer): `info` once, and it counts as "
           "trained. A parameter whose module never ran is unused: "
           "`info` once. Every gradient of an optimizer present but exactly zero (a clip value of "
           "0, a mask that zeroes everything) is an `error`: nothing trains (once per optimizer "
           "and run: a rate that saturates the model makes such streaks come and go); while "
           "the loss itself is exactly 0 at each of those steps (a hinge or margin loss every "
           "sample clears), its gradient is rightly zero and it is a `warning` that says so. A "
           "`backward()` that reached no watched parameter at all is one `error` finding naming "
           "the break; so is, "
           "once per run, a `backward()` from a leaf loss (rebuilt from `.item()` with "
           "`requires_grad=True` set by hand) in a step whose other passes do train. One "
           "finding per episode lists the tensors (count and the first names, in forward "
           "order).",
           "never a non-zero gradient while its module ran (or its gradient existed) "
           "{coverage.PERSIST_STEPS} steps in a row; unused: none for {coverage.UNUSED_STEPS} "
           "steps; all zero: every gradient exactly zero {coverage.PERSIST_STEPS} steps in a row "
           "after a backward; the episode ends after {coverage.EPISODE_CALM} steps without any",
           "conditional computation — a parameter that has had a gradient before (experts a "
           "top-1 router leaves idle, task heads used in turn, layers frozen by `no_grad` after "
           "warm-up); modules that do not run (info at most); some tensors with exactly zero "
           "gradients while others train; a bias the loss is invariant to (info); frozen "
           "parameters",
           signs=frozenset({"lr-harm", "no-info"}),
           confirms=("loss-detached", "detached-in-loss-path"),
           row="values"),
        Check(PARAM_NOT_IN_OPTIMIZER, "error", "before-update",
           "A trainable parameter of the watched model is in no optimizer param group (a layer "
           "replaced after the optimizer was built); also an `nn.Parameter` the loss reaches "
           "that no watched model and no optimizer holds (layers in a plain list or dict, "
           "parameters made in `forward`), with shapes and the module holding it. One finding "
           "lists them all.",
           "checked at the start and every {checks.COVERAGE_EVERY} steps",
           "parameters with `requires_grad=False`; a complete copy of a watched model (same "
           "class and parameter shapes) that feeds a loss which also trains the model — a "
           "target network or EMA copy — is `info`, said as such; so is, by the same test, a "
           "submodule of a watched model that copies a trained one (a `target_net` beside "
           "`net`) when the loss does not reach it (no gradient after the first backward; one "
           "it reaches is a layer left out, an `error` at step 1: identical blocks share "
           "shapes); and a base left trainable under adapters — the optimizer holds exactly "
           "the parameters of the model's registered parametrizations (LoRA as minLoRA adds "
           "it) — is `info` with the advice to call `requires_grad_(False)` on it",
           confirms=(PARAM_NOT_IN_OPTIMIZER,)),
        Check(FROZEN_PARAM_IN_OPTIMIZER, "warning", "before-update",
           "A parameter with `requires_grad=False` sits in an optimizer and never trains "
           "(`info` while frozen; `warning` once frozen past the horizon); one finding per "
           "severity lists the tensors.",
           "warning after {coverage.FROZEN_HORIZON} steps frozen",
           "progressive unfreezing within the horizon"),
        Check(PARAM_NOT_UPDATED, "warning", "after-update",
           "A parameter with a non-zero gradient did not change at `step()`; one finding per "
           "episode lists the tensors. When their group's learning rate has collapsed, "
           "`lr-collapse` is reported first, at the same step, and this finding is its "
           "consequence.",
           "unchanged for {coverage.PERSIST_STEPS} steps in a row; the episode ends after "
           "{coverage.EPISODE_CALM} steps without any",
           "zero gradients; optimizers that skip a step on purpose (GradScaler overflow); "
           "updates below the tensor's float resolution because its learning rate fell (a "
           "schedule ending near zero): the tensor's latest non-zero update, scaled by how "
           "much its rate has fallen since, is at most `eps(dtype) · ‖θ‖` (a tensor that "
           "never moved, or a rate of exactly 0, is no such evidence)",
           signs=frozenset({"stalled", "faded"}),
           row="update"),
        Check(FROZEN_PARAM_CHANGED, "warning", "after-update",
           "A parameter with `requires_grad=False` changed value (weight decay or momentum on a "
           "frozen tensor); one finding lists the tensors.",
           "a non-zero update norm at a step",
           "tensors unfrozen before the change",
           row="update"),
        Check(PARAM_MUTATED_OUTSIDE_STEP, "info", "before-update",
           "A parameter changed between two steps without an optimizer step (in-place `.data` "
           "edits, EMA copies, manual clipping of weights); one finding per episode lists the "
           "tensors.",
           "compared every {stepcheck.MUTATION_EVERY} collected steps",
           "nothing: it is `info` because EMA and weight clipping are often intended",
           cause=Cause(
                "parameter changed outside step()", 120, frozenset({"symptom"}),
                also=frozenset({FROZEN_PARAM_CHANGED, PARAM_NOT_UPDATED}), window=20,
            )),
    ),
    constants={
        "checks": "gradwatch.checks.engine",
        "coverage": "gradwatch.checks.coverage",
        "stepcheck": "gradwatch.hooks.stepcheck",
    },
)  # fmt: skip
