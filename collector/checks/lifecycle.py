"""Optimizer lifecycle checks: ``stale-grad``, ``grad-zeroed-before-step``,
``step-without-backward``. Host facts only: they always run in real time, before the step."""

from __future__ import annotations

from gradwatch.checks.view import StepView
from gradwatch.findings import Action, FindingSink, finding


def _last(events: list[tuple[str, float, str]], kind: str) -> int:
    return max((i for i, e in enumerate(events) if e[0] == kind), default=-1)


class LifecycleChecks:
    """The three lifecycle checks of one run."""

    def __init__(self, sink: FindingSink, accumulation_steps: int | None) -> None:
        self.sink = sink
        self.declared = accumulation_steps

    def pre_step(self, v: StepView) -> list[Action]:
        """Evaluate before the update is applied."""
        return [self._stale(v), self._zeroed(v), self._without_backward(v)]

    def _stale(self, v: StepView) -> Action:
        expected = max(v.n_backward, 1) if self.declared is None else self.declared
        leaked = v.since_clear > v.n_backward  # gradients from before the previous step
        if v.since_clear > expected or (leaked and v.n_backward > 0):
            return self.sink.report(
                finding(
                    "stale-grad",
                    v.step,
                    f"this step applies gradients summed over {v.since_clear} backward passes, "
                    f"but only {v.n_backward} happened since the previous step"
                    + (f" (declared accumulation: {self.declared})" if self.declared else "")
                    + ": gradients are not being cleared.",
                    "call optimizer.zero_grad() once per optimizer step (before backward, or "
                    "right after step()); with gradient accumulation pass "
                    "accumulation_steps=K to watch() (gradwatch run --accumulation-steps K).",
                    optimizer=v.optimizer,
                    details={
                        "backward_since_clear": v.since_clear,
                        "backward_since_step": v.n_backward,
                        "declared_accumulation": self.declared,
                    },
                )
            )
        self.sink.clear("stale-grad", None, v.optimizer)
        return "none"

    def _zeroed(self, v: StepView) -> Action:
        last_backward = _last(v.events, "backward")
        cleared = [e for e in v.events[last_backward + 1 :] if e[0] == "zero_grad"]
        if last_backward >= 0 and cleared:
            return self.sink.report(
                finding(
                    "grad-zeroed-before-step",
                    v.step,
                    f"gradients were cleared ({cleared[0][2]}) after the last backward and before "
                    "step(), so this step applies no gradient.",
                    "move zero_grad() before the backward pass (or after step()), never between "
                    "backward() and step().",
                    optimizer=v.optimizer,
                    details={"events": [e[0] for e in v.events], "cleared_by": cleared[0][2]},
                )
            )
        self.sink.clear("grad-zeroed-before-step", None, v.optimizer)
        return "none"

    def _without_backward(self, v: StepView) -> Action:
        if v.n_backward == 0 and not v.has_closure:
            return self.sink.report(
                finding(
                    "step-without-backward",
                    v.step,
                    "step() was called with no backward pass since the previous step, so it "
                    "re-applies old gradients or none.",
                    "call loss.backward() before every optimizer.step() (or remove the extra "
                    "step() call).",
                    optimizer=v.optimizer,
                    details={"events": [e[0] for e in v.events]},
                )
            )
        self.sink.clear("step-without-backward", None, v.optimizer)
        return "none"
