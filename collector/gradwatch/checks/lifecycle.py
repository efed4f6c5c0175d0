"""Optimizer lifecycle checks: ``stale-grad``, ``grad-zeroed-before-step``,
``step-without-backward``, ``accumulation-wiped`` and, for a backward pass cut from the
model, ``param-no-grad``. Host facts only: they always run in real time, before the step.

Each tests the training loop's code, which a run does not change: ``stale-grad``, ``grad-
zeroed-before-step``, ``step-without-backward`` and the cut loss's ``param-no-grad`` are one
finding per optimizer and run from their first step on — the condition coming back later (a
``step()`` called twice per backward holds every other step; a critic's cleared gradients
every ``n_critic`` steps) is the same bug, not a new one."""

from __future__ import annotations

from collections.abc import Callable

from gradwatch.checks.findings import Action, FindingSink, finding
from gradwatch.checks.view import Event, StepView
from gradwatch.core import checkids

#: the check ids of :meth:`LifecycleChecks.pre_step`'s actions, in order
IDS = (
    checkids.STALE_GRAD,
    checkids.GRAD_ZEROED_BEFORE_STEP,
    checkids.STEP_WITHOUT_BACKWARD,
    checkids.ACCUMULATION_WIPED,
)
#: the ids whose finding lasts the rest of the run once found (never cleared)
KEPT = frozenset(
    {checkids.STALE_GRAD, checkids.GRAD_ZEROED_BEFORE_STEP, checkids.STEP_WITHOUT_BACKWARD}
)


def _last(events: list[Event], kind: str) -> int:
    return max((i for i, e in enumerate(events) if e[0] == kind), default=-1)


def _cleared_after_backward(events: list[Event]) -> list[Event]:
    """The gradient clearings after the step's last backward pass (none without one).

    A pass cut from the model (``backward-cut``: it reached no watched tensor) is a backward
    pass in the loop's order too: a clear before it is in its right place, and what the step
    lacks is that pass's gradient, which ``param-no-grad`` names (an InfoGAN generator loss
    rebuilt from ``.item()``: ``zero_grad(); g_loss.backward(); step()`` clears only what an
    earlier pass of another optimizer left, already applied there)."""
    if not events or events[-1][0] in ("backward", "backward-cut"):
        return []  # the common step: backward came last
    if _last(events, "backward") < 0:
        return []
    last_backward = max(_last(events, "backward"), _last(events, "backward-cut"))
    return [e for e in events[last_backward + 1 :] if e[0] == "zero_grad"]


def _wiped(events: list[Event]) -> int:
    """Backward passes whose gradients were cleared before any step applied them; none when
    the step applies gradients the program wrote by hand (``grad_written``: gradient
    surgery harvests each pass's gradients before the next clear, then writes their
    combination)."""
    if any(e[0] == "grad_written" for e in events):
        return 0
    return sum(int(e[2]) for e in events if e[0] == "wiped")


#: the cut of a backward pass whose loss is a leaf tensor (``hooks.connectivity``): it has
#: no history at all, so it can train nothing, whatever other passes of the step reach
LEAF_CUT = (
    "the loss is a leaf tensor whose requires_grad was set by hand (rebuilt from .item(), "
    "numpy or torch.tensor(...), then requires_grad=True), so it has no history back to "
    "the model"
)


def _leaf_cuts(events: list[Event]) -> int:
    """Backward passes of the step whose loss was a leaf tensor (no history)."""
    return sum(1 for e in events if e[0] == "backward-cut" and e[2] == LEAF_CUT)


WIPED_STEPS = 2  # steps in a row that discard gradients before accumulation-wiped holds


class LifecycleChecks:
    """The lifecycle checks of one run."""

    def __init__(self, sink: FindingSink, accumulation_steps: int | None) -> None:
        self.sink = sink
        self.declared = accumulation_steps
        self._wiped_streak: dict[int, int] = {}  # optimizer -> steps in a row with wipes
        self._cut: set[int] = set()  # optimizers whose loss is cut from the model now
        #: whether optimizer ``o`` is the stand-in of a loop that updates by hand (set by
        #: the check engine): its fix is a clear by hand, there is no optimizer to call
        self.by_hand: Callable[[int], bool] = lambda _o: False

    def pre_step(self, v: StepView) -> list[Action]:
        """Evaluate before the update is applied (one action per id of :data:`IDS`)."""
        return [self._stale(v), self._zeroed(v), self._without_backward(v), self._wiped(v)]

    def quiet(self, n_backward: int, since_clear: int, events: list[Event], closure: bool) -> bool:
        """Whether no lifecycle check holds for these facts (the common step: the caller
        then need not build a :class:`StepView`). The same predicates as the checks."""
        return (
            not self._is_stale(n_backward, since_clear)
            and not _cleared_after_backward(events)
            and not (n_backward == 0 and not closure)
            and not self._wiped_streak
            and not self._cut
            and not _wiped(events)
            and not (n_backward and _leaf_cuts(events))
        )

    def _is_stale(self, n_backward: int, since_clear: int) -> bool:
        expected = max(n_backward, 1) if self.declared is None else self.declared
        leaked = since_clear > n_backward  # gradients from before the previous step
        return since_clear > expected or (leaked and n_backward > 0)

    def _stale(self, v: StepView) -> Action:
        if self._is_stale(v.n_backward, v.since_clear):
            return self.sink.report(
                finding(
                    checkids.STALE_GRAD,
                    v.step,
                    f"this step applies gradients summed over {v.since_clear} backward passes, "
                    f"but only {v.n_backward} happened since the previous step"
                    + (f" (declared accumulation: {self.declared})" if self.declared else "")
                    + ": gradients are not being cleared.",
                    (
                        "clear the gradients once per update by hand (model.zero_grad(), or "
                        "p.grad = None for each parameter, before backward or right after the "
                        "update)"
                        if self.by_hand(v.optimizer)
                        else "call optimizer.zero_grad() once per optimizer step (before "
                        "backward, or right after step())"
                    )
                    + "; with gradient accumulation pass accumulation_steps=K to watch() "
                    "(gradwatch run --accumulation-steps K).",
                    optimizer=v.optimizer,
                    details={
                        "backward_since_clear": v.since_clear,
                        "backward_since_step": v.n_backward,
                        "declared_accumulation": self.declared,
                    },
                )
            )
        return "none"  # not cleared: see the module's docstring

    def _zeroed(self, v: StepView) -> Action:
        cleared = _cleared_after_backward(v.events)
        if cleared:
            return self.sink.report(
                finding(
                    checkids.GRAD_ZEROED_BEFORE_STEP,
                    v.step,
                    f"gradients were cleared ({cleared[0][2]}) after the last backward and before "
                    "step(), so this step applies no gradient.",
                    "move zero_grad() before the backward pass (or after step()), never between "
                    "backward() and step().",
                    optimizer=v.optimizer,
                    details={"events": [e[0] for e in v.events], "cleared_by": cleared[0][2]},
                )
            )
        return "none"  # not cleared: see the module's docstring

    def _without_backward(self, v: StepView) -> Action:
        cut = [e[2] for e in v.events if e[0] == "backward-cut"]
        if v.n_backward == 0 and not v.has_closure and cut:
            return self._cut_loss(v, cut)
        leaf = _leaf_cuts(v.events)
        if leaf and v.n_backward:
            return self._leaf_loss(v, leaf)
        if v.optimizer in self._cut and v.n_backward:
            # the finding stays (the loop's code cut the loss: a WGAN critic whose loss is
            # rebuilt from .item() has another model's backward reach it every n_critic steps)
            self._cut.discard(v.optimizer)
        if v.n_backward == 0 and not v.has_closure:
            return self.sink.report(
                finding(
                    checkids.STEP_WITHOUT_BACKWARD,
                    v.step,
                    "step() was called with no backward pass since the previous step, so it "
                    "re-applies old gradients or none.",
                    "call loss.backward() before every optimizer.step() (or remove the extra "
                    "step() call).",
                    optimizer=v.optimizer,
                    details={"events": [e[0] for e in v.events]},
                )
            )
        return "none"  # not cleared: see the module's docstring

    def _cut_loss(self, v: StepView, cut: list[str]) -> Action:
        """backward() ran, but reached no parameter of this optimizer: the loss is not
        connected to the model (``param-no-grad``, not ``step-without-backward``). Kept
        apart from the per-tensor episodes (``optimizer`` None), which would end it."""
        self.sink.clear(checkids.STEP_WITHOUT_BACKWARD, None, v.optimizer)
        self._cut.add(v.optimizer)
        return self.sink.report(
            finding(
                checkids.PARAM_NO_GRAD,
                v.step,
                f"backward() ran {len(cut)} time(s) since the previous step but reached no "
                f"parameter of optimizer {v.optimizer}: the loss is not connected to the model "
                f"({cut[-1]}).",
                "compute the loss from the model's output tensors with torch operations; do not "
                "rebuild it from .item()/.tolist()/numpy values or torch.tensor(...), do not "
                ".detach() on the way, and never set loss.requires_grad = True to silence the "
                "error that reveals this.",
                severity="error",
                details={"optimizer": v.optimizer, "cut_backward": len(cut), "where": cut[-1]},
            )
        )

    def _leaf_loss(self, v: StepView, leaf: int) -> Action:
        """A backward pass from a leaf loss in a step whose other passes did train: that
        loss term was rebuilt from its value and trains nothing (one term of a GAN's
        discriminator loss). Which optimizer it was meant for cannot be told (it reached
        none): one finding per run, on the same key as a wholly cut loss."""
        return self.sink.report(
            finding(
                checkids.PARAM_NO_GRAD,
                v.step,
                f"backward() ran {leaf} time(s) since the previous step on a loss that reaches "
                f"no parameter ({LEAF_CUT}); the step applies only the other "
                f"{v.n_backward} backward pass(es): that loss term trains nothing.",
                "compute the loss from the model's output tensors with torch operations; do not "
                "rebuild it from .item()/.tolist()/numpy values or torch.tensor(...), and never "
                "set loss.requires_grad = True to silence the error that reveals this.",
                severity="error",
                details={"optimizer": v.optimizer, "cut_backward": leaf, "where": LEAF_CUT},
            )
        )

    def _wiped(self, v: StepView) -> Action:
        wiped = _wiped(v.events)
        streak = self._wiped_streak.get(v.optimizer, 0) + 1 if wiped else 0
        if streak:
            self._wiped_streak[v.optimizer] = streak
        else:
            self._wiped_streak.pop(v.optimizer, None)
        if streak >= WIPED_STEPS:
            n = v.n_backward
            return self.sink.report(
                finding(
                    checkids.ACCUMULATION_WIPED,
                    v.step,
                    f"gradients of {wiped} of the {n} backward passes since the previous step "
                    "were cleared before any step used them, so each step applies only the "
                    "micro-batches after the last clear.",
                    "with gradient accumulation call zero_grad() once per optimizer step (right "
                    "after step(), or only at the first micro-batch), never inside the "
                    "micro-batch loop.",
                    optimizer=v.optimizer,
                    details={"discarded_backward": wiped, "backward_since_step": n},
                )
            )
        self.sink.clear(checkids.ACCUMULATION_WIPED, None, v.optimizer)
        return "none"
