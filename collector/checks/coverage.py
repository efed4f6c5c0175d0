"""Parameter coverage checks: ``param-no-grad``, ``param-not-in-optimizer``,
``frozen-param-in-optimizer``, ``param-not-updated``, ``frozen-param-changed``,
``param-mutated-outside-step``."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatch

import torch

from gradwatch.checks.findings import Action, FindingSink, finding
from gradwatch.checks.view import StepView, held_for

PERSIST_STEPS = 3  # param-no-grad and param-not-updated must hold this many steps in a row
FROZEN_HORIZON = 1000  # steps a tensor may stay frozen in an optimizer before a warning


class CoverageChecks:
    """Coverage checks of one run; per-tensor streaks are kept per optimizer."""

    def __init__(self, sink: FindingSink, allow_mutation: Iterable[str] = ()) -> None:
        self.sink = sink
        self.allow_mutation = tuple(allow_mutation)
        self._no_grad: dict[int, torch.Tensor] = {}
        self._not_updated: dict[int, torch.Tensor] = {}
        self._frozen_since: dict[tuple[int, int], int] = {}
        self._trained: set[tuple[int, int]] = set()

    # -- host facts -----------------------------------------------------------------------
    def not_in_optimizer(self, names: list[str], step: int) -> None:
        """Trainable tensors of the watched models that no watched optimizer holds."""
        for name in names:
            self.sink.report(
                finding(
                    "param-not-in-optimizer",
                    step,
                    "this trainable parameter is in no optimizer, so it never trains (a layer "
                    "replaced after the optimizer was built, or submodules kept in a plain list?).",
                    "build the optimizer after the model is final, register submodules with "
                    "nn.ModuleList/ModuleDict, or set requires_grad=False if it is meant to be "
                    "frozen.",
                    param=name,
                    details={"param": name},
                )
            )

    def frozen(self, v: StepView, *, final: bool = False) -> None:
        """``frozen-param-in-optimizer``: info while frozen, warning past the horizon."""
        for i, name in enumerate(v.names):
            key = (v.optimizer, i)
            if v.requires_grad[i]:
                self._trained.add(key)
                self._frozen_since.pop(key, None)
                continue
            since = self._frozen_since.setdefault(key, v.step)
            frozen_for = v.step - since
            late = key not in self._trained and (final or frozen_for >= FROZEN_HORIZON)
            self.sink.report(
                finding(
                    "frozen-param-in-optimizer",
                    v.step,
                    f"this parameter has requires_grad=False but sits in optimizer {v.optimizer}"
                    + (
                        f" and has not trained for {frozen_for} steps."
                        if late
                        else " (fine while it is meant to stay frozen for now)."
                    ),
                    "if it should train, set requires_grad=True before training; if it should "
                    "stay frozen, leave it out of the optimizer.",
                    severity="warning" if late else "info",
                    param=name,
                    optimizer=v.optimizer,
                    details={"frozen_since_step": since, "frozen_for_steps": frozen_for},
                )
            )

    def no_grad_streak(self, optimizer: int) -> bool:
        """Whether a ``param-no-grad`` streak of ``optimizer`` is running."""
        return optimizer in self._no_grad

    def not_updated_streak(self, optimizer: int) -> bool:
        """Whether a ``param-not-updated`` streak of ``optimizer`` is running."""
        return optimizer in self._not_updated

    # -- values ---------------------------------------------------------------------------
    def no_grad(self, v: StepView) -> list[Action]:
        """``param-no-grad``: a trainable tensor got no (or an all-zero) gradient 3 steps in
        a row while others did."""
        assert v.grad_norm is not None
        streak = self._no_grad.get(v.optimizer)
        if streak is None and all(v.has_grad) and bool((v.grad_norm != 0).all()):
            self.sink.settle("param-no-grad", v.optimizer, set())
            return []  # the common case: every tensor got a gradient
        has = v.has_grad_t & (v.grad_norm != 0)
        missing = v.trainable_t & ~has & bool(has.any())
        streak = held_for(streak, missing)
        if bool(streak.any()):
            self._no_grad[v.optimizer] = streak
        else:
            self._no_grad.pop(v.optimizer, None)
        bad = torch.nonzero(streak >= PERSIST_STEPS).flatten().tolist()
        self.sink.settle("param-no-grad", v.optimizer, {v.names[i] for i in bad})
        return [
            self.sink.report(
                finding(
                    "param-no-grad",
                    v.step,
                    *_no_grad_text(int(streak[i]), v.has_grad[i]),
                    param=v.names[i],
                    optimizer=v.optimizer,
                    details={"steps_without_grad": int(streak[i]), "has_grad": v.has_grad[i]},
                )
            )
            for i in bad
        ]

    def after_update(self, v: StepView) -> None:
        """``param-not-updated`` and ``frozen-param-changed`` from the update norms."""
        assert v.update_norm is not None and v.grad_norm is not None
        g = v.grad_norm
        frozen = not all(v.requires_grad)
        if (
            v.optimizer not in self._not_updated
            and not frozen
            and not bool((v.update_norm == 0).any())
        ):
            return  # the common case: every tensor moved, none is frozen
        finite = torch.isfinite(g)
        top = float(g[finite].max()) if bool(finite.any()) else 0.0
        # an update of a gradient ~1e-4× the largest one can round to zero: not "stuck"
        stuck = (g > 1e-4 * top) & finite & (v.update_norm == 0)
        streak = self._not_updated.get(v.optimizer)
        streak = held_for(streak, stuck)
        if bool(streak.any()):
            self._not_updated[v.optimizer] = streak
        else:
            self._not_updated.pop(v.optimizer, None)
        if self.sink.enabled("param-not-updated"):
            for i in torch.nonzero(streak >= PERSIST_STEPS).flatten().tolist():
                self.sink.report(
                    finding(
                        "param-not-updated",
                        v.step,
                        "this parameter had a non-zero gradient but did not change for "
                        f"{int(streak[i])} steps.",
                        "check its param group's learning rate (0?) and that the optimizer holds "
                        "this exact tensor.",
                        param=v.names[i],
                        optimizer=v.optimizer,
                        details={
                            "grad_norm": float(g[i]),
                            "lr": v.lr[v.group_of[i]] if v.group_of else None,
                        },
                    )
                )
        changed = ~v.trainable_t & (v.update_norm > 0)
        if frozen and self.sink.enabled("frozen-param-changed") and bool(changed.any()):
            for i in torch.nonzero(changed).flatten().tolist():
                self.sink.report(
                    finding(
                        "frozen-param-changed",
                        v.step,
                        "this parameter has requires_grad=False but the optimizer changed it "
                        "(weight decay or momentum acting on a frozen tensor).",
                        "leave frozen tensors out of the optimizer, or set weight_decay=0 for "
                        "them.",
                        param=v.names[i],
                        optimizer=v.optimizer,
                        details={"update_norm": float(v.update_norm[i])},
                    )
                )

    def mutated(self, v: StepView, previous: torch.Tensor | None, now: torch.Tensor) -> None:
        """``param-mutated-outside-step``: the norm of θ changed between two steps."""
        if previous is None or previous.shape != now.shape or torch.equal(previous, now):
            return  # torch.equal: one op and no copy in the common case (nothing changed)
        changed = (previous != now) & torch.isfinite(previous) & torch.isfinite(now)
        for i in torch.nonzero(changed).flatten().tolist():
            name = v.names[i]
            if any(fnmatch(name, pattern) for pattern in self.allow_mutation):
                continue
            self.sink.report(
                finding(
                    "param-mutated-outside-step",
                    v.step,
                    "this parameter changed between two optimizer steps without a step "
                    "(an in-place .data edit?).",
                    "if intended (EMA, manual clipping), add the name to "
                    "watch(allow_mutation=[...]);"
                    " otherwise find the in-place edit.",
                    param=name,
                    optimizer=v.optimizer,
                    details={
                        "norm_after_previous_step": float(previous[i]),
                        "norm_before_this_step": float(now[i]),
                    },
                )
            )


def _no_grad_text(steps: int, has_grad: bool) -> tuple[str, str]:
    """Message and hint of ``param-no-grad``: no gradient at all means the tensor is cut off
    from the loss; an all-zero one may also mean that nothing flows back to it (the
    gradient tensor exists, but every path to the loss multiplies to zero)."""
    if not has_grad:
        return (
            f"this trainable parameter received no gradient for {steps} steps: it is cut off "
            "from the loss.",
            "look for .detach(), .item(), torch.tensor(t), a no_grad block or an unused branch "
            "between this layer and the loss.",
        )
    return (
        f"this trainable parameter's gradient has been exactly zero for {steps} steps: it is "
        "cut off from the loss, or nothing flows back to it (dead activations, a zero layer "
        "after it, or a gradient that underflowed through a deep stack).",
        "look for .detach()/.item()/torch.tensor(t) between this layer and the loss; if it "
        "is connected, look for saturated or dead activations and the initialisation (a "
        "normalisation layer or residual connection keeps gradients alive in deep stacks).",
    )
