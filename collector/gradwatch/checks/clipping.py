"""``clip-before-backward``: gradient clipping that ran before the step's ``backward()``.

``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` called on an optimizer's
parameters add a ``clip`` event to that optimizer's step (:mod:`gradwatch.hooks.clipgrad`),
in order with its ``backward`` events. A step is wrong when it clipped, and every clip came
before its last backward pass: the clip saw the previous step's gradients (or none, after
``zero_grad(set_to_none=True)``), and the update applies the unclipped ones. Clipping after
each micro-batch's backward (gradient accumulation), after ``GradScaler.unscale_``, or of
another model's parameters is no such step. Host facts only: checked before the update.
"""

from __future__ import annotations

from gradwatch.checks.findings import Action, FindingSink, finding
from gradwatch.checks.view import Event, StepView
from gradwatch.core import checkids

ID = checkids.CLIP_BEFORE_BACKWARD
#: steps that clipped before backward (in the run) before the finding is reported
CLIP_STEPS = 2


def misplaced(events: list[Event]) -> str | None:
    """The clipping function of a step whose every clip came before its last backward
    pass, or None (no clip, a clip after the last backward, or no backward at all)."""
    last_backward = -1
    clip: str | None = None
    clip_after = False
    for i, (kind, _, detail) in enumerate(events):
        if kind == "backward":
            last_backward, clip_after = i, False
        elif kind == "clip":
            clip, clip_after = detail, True
    if clip is None or last_backward < 0 or clip_after:
        return None
    return clip


class ClipChecks:
    """``clip-before-backward`` for every optimizer of one run."""

    def __init__(self, sink: FindingSink) -> None:
        self.sink = sink
        #: a clipping function was called on a watched optimizer's parameters (until then
        #: the check costs nothing per step)
        self.seen = False
        self._bad: dict[int, int] = {}  # optimizer -> steps that clipped before backward

    def quiet(self, o: int, events: list[Event]) -> bool:
        """Whether :meth:`pre_step` would report and clear nothing."""
        if not self.seen:
            return True
        if misplaced(events) is not None:
            return False
        return not (any(e[0] == "clip" for e in events) and self.sink.active(ID, o))

    def pre_step(self, v: StepView) -> Action:
        """Before the update."""
        fn = misplaced(v.events)
        if fn is None:
            if any(e[0] == "clip" for e in v.events):  # a clip in its place ends an episode
                self.sink.clear(ID, None, v.optimizer)
            return "none"
        bad = self._bad[v.optimizer] = self._bad.get(v.optimizer, 0) + 1
        if bad < CLIP_STEPS:
            return "none"
        return self.sink.report(
            finding(
                ID,
                v.step,
                f"{fn} ran before backward() at {bad} steps so far, this one included: it clips "
                "the previous gradients (or none), and the step applies unclipped ones.",
                f"call {fn} after loss.backward() (after scaler.unscale_(optimizer) with a "
                "GradScaler) and before optimizer.step().",
                optimizer=v.optimizer,
                details={"function": fn, "steps": bad, "events": [e[0] for e in v.events]},
            )
        )
