"""The optimizer-lifecycle checks (implemented in :mod:`gradwatch.checks.lifecycle` and
:mod:`gradwatch.checks.clipping`), declared for the check registry
(:mod:`gradwatch.core.registry`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.registry import Cause, Check, Family

__all__ = [
    "ACCUMULATION_WIPED",
    "CLIP_BEFORE_BACKWARD",
    "GRAD_ZEROED_BEFORE_STEP",
    "STALE_GRAD",
    "STEP_WITHOUT_BACKWARD",
]

STALE_GRAD: Final = "stale-grad"
GRAD_ZEROED_BEFORE_STEP: Final = "grad-zeroed-before-step"
STEP_WITHOUT_BACKWARD: Final = "step-without-backward"
CLIP_BEFORE_BACKWARD: Final = "clip-before-backward"
ACCUMULATION_WIPED: Final = "accumulation-wiped"

FAMILY: Final = Family(
    __name__,
    "Optimizer lifecycle",
    (
        Check(STALE_GRAD, "error", "before-update",
           "`step()` applies gradients summed over more backward passes than the declared "
           "accumulation: a missing `zero_grad()`.",
           "backward passes since the last clearing > `accumulation_steps` (default 1); one "
           "finding per optimizer and run (the loop's code does not change: a return is the same "
           "bug)",
           "gradient accumulation declared with `accumulation_steps` / `--accumulation-steps`; "
           "closures (LBFGS); gradients cleared by hand (`p.grad = None`, `p.grad.zero_()`, or "
           "through `.data`, which moves no version counter: gradients all exactly zero right "
           "before the next backward pass were cleared)",
           cause=Cause("stale gradients", 60, frozenset({"symptom", "stalled"})),
           confirms=(STALE_GRAD,)),
        Check(GRAD_ZEROED_BEFORE_STEP, "error", "before-update",
           "Gradients were cleared after the last `backward()` and before `step()`: the step "
           "applies nothing.",
           "a clearing event after the step's last backward pass; one finding per optimizer and "
           "run",
           "`zero_grad()` before `backward()` or right after `step()`; gradients written by "
           "hand before the step (`p.grad = g` with a tensor: gradient surgery such as PCGrad "
           "writes the combination of the per-task gradients it harvested; a written gradient "
           "of zeros is `param-no-grad`'s all-zero case)",
           cause=Cause("gradients cleared", 70, frozenset({"stalled", "symptom"})),
           confirms=(GRAD_ZEROED_BEFORE_STEP,)),
        Check(STEP_WITHOUT_BACKWARD, "warning", "before-update",
           "`step()` ran with no `backward()` since the previous step (a backward that reached "
           "no parameter is `param-no-grad`, not this).",
           "zero backward passes since the previous step; one finding per optimizer and run (a "
           "`step()` twice per backward holds every other step)",
           "closures (LBFGS); schedulers and optimizers stepped as the loop intends"),
        Check(CLIP_BEFORE_BACKWARD, "warning", "before-update",
           "`clip_grad_norm_` / `clip_grad_value_` ran on the optimizer's parameters before the "
           "step's `backward()` and not after it: it clips the previous step's gradients (or "
           "none, after `zero_grad(set_to_none=True)`) and the step applies unclipped ones. The "
           "same id as the `gradwatch lint` rule.",
           "every clip of a step before its last backward pass, at {clipping.CLIP_STEPS} steps of "
           "the run; the episode ends at a step that clips after its backward",
           "clipping after `backward()` (also after `GradScaler.unscale_`), after each "
           "micro-batch's backward with gradient accumulation, inside `step(closure)`; clipping "
           "another model's parameters",
           cause=Cause("clipping before backward()", 90, frozenset({"symptom"})),
           confirms=(CLIP_BEFORE_BACKWARD,)),
        Check(ACCUMULATION_WIPED, "error", "before-update",
           "Gradients of backward passes were cleared before any `step()` applied them "
           "(`zero_grad()` every micro-batch, `step()` every k): each step applies only the last "
           "micro-batch. The same id as the `gradwatch lint` rule.",
           "discarded backward passes at 2 steps in a row",
           "clears inside `step(closure)` (LBFGS, Lightning); gradients another optimizer applied "
           "(GANs); iterations a GradScaler skipped; correct accumulation; gradients used by "
           "hand before the clear (the parameters changed in place since the backward pass: "
           "sharpness-aware minimisation's first pass, also as a wrapper optimizer whose "
           "`zero_grad` clears the inner optimizer's gradients; a manual update); passes made "
           "for an input's gradient (a training forward whose input requires a gradient and "
           "reaches a tensor in no model or optimizer within a few autograd nodes: FGSM/PGD "
           "adversarial training, saliency maps); steps that apply gradients written by hand "
           "(`p.grad = g`: gradient surgery harvests each pass's gradients before clearing)",
           cause=Cause("discarded gradients", 80, frozenset({"stalled", "symptom"})),
           confirms=(ACCUMULATION_WIPED,)),
    ),
    constants={
        "clipping": "gradwatch.checks.clipping",
    },
)  # fmt: skip
