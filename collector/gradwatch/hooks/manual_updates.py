"""Training loops without ``torch.optim``: parameters updated by hand
(``p.data.add_(-lr * p.grad)``, ``with torch.no_grad(): p -= lr * p.grad``).

``watch(model)`` without an optimizer watches such a loop through :class:`ManualUpdates`,
a stand-in optimizer over the model's trainable tensors that nobody steps: one *step* is
one update of the parameters, found after the fact. After each backward pass that reached
them, :class:`ManualDriver` takes what the step pre-hook of a real optimizer would (the
gradient statistics and the parameter snapshot) and remembers the tensors' version
counters; at the next training forward, ``zero_grad``, backward pass or ``close()`` it
looks whether the parameters changed since — a version counter moved (``p -= …`` under
``no_grad``), or, for ``.data`` edits that no counter sees, the values differ from the
snapshot — and if so runs the step's checks and statistics as for ``optimizer.step()``.
The checks see the model's train/eval modes as they were at that backward pass (the loop
may have called ``model.eval()`` for a validation since the update). A policy that acts
before the update (``skip``) cannot act here: the update is done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    import weakref

    from gradwatch.checks.engine import CheckEngine
    from gradwatch.stats.tensors import PreStep, StepStats


class UpdatedByHand(Protocol):
    """What the driver reads of its optimizer watch
    (:class:`gradwatch.hooks.optimizer.OptimizerWatch`)."""

    @property
    def params(self) -> list[torch.Tensor]: ...
    @property
    def model_keys(self) -> list[str]: ...
    @property
    def stats(self) -> StepStats: ...
    @property
    def _grads(self) -> list[tuple[weakref.ref[torch.Tensor], int] | None]: ...

    def manual_step(self, pre: PreStep, cleared: bool) -> None: ...


class ManualUpdates(torch.optim.Optimizer):
    """The tensors of a loop that updates its parameters by hand (never stepped)."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        super().__init__(params, {})

    def step(self, closure: Any = None) -> Any:
        """Nothing: a script that updates by hand never calls it."""
        return None


class ManualDriver:
    """Finds the updates of one :class:`ManualUpdates` watch."""

    def __init__(self, watch: UpdatedByHand, checks: CheckEngine) -> None:
        self.w = watch
        self.checks = checks
        self._versions: list[int] | None = None  # as after the last backward pass
        self._norms: list[torch.Tensor] | None = None  # when there is no snapshot
        self._pre: PreStep | None = None
        self._modes: list[tuple[torch.nn.Module, bool]] = []  # as at the last backward

    def after_backward(self) -> None:
        """A backward pass reached the parameters: the state before a coming update."""
        stats = self.w.stats
        self._pre = stats.before_step(now=True)
        params = self.w.params
        self._versions = [p._version for p in params]
        checks = self.checks
        self._modes = [
            (m, m.training)
            for key in self.w.model_keys
            for m in (checks.models[key], *(mod for _, mod in checks.modes[key]))
        ]
        self._norms = None if stats._snapshot is not None else list(torch._foreach_norm(params))

    def check(self) -> None:
        """If the parameters changed since the last backward pass, that was one step."""
        if self._versions is None or not self._changed():
            return
        pre, self._pre, self._versions, self._norms = self._pre, None, None, None
        assert pre is not None
        now = [(m, m.training) for m, _ in self._modes]
        try:
            for m, training in self._modes:
                m.training = training  # the flag only: train() would recurse
            self.w.manual_step(pre, self._cleared_by_hand())
        finally:
            for m, training in now:
                m.training = training

    def _cleared_by_hand(self) -> bool:
        """Whether a gradient was set to None, replaced or zeroed in place since the last
        backward pass (after the update: it was found later). Clipping also edits in place,
        but leaves values that are not all 0."""
        for p, seen in zip(self.w.params, self.w._grads, strict=True):
            if seen is None:
                continue
            grad = p.grad
            if grad is None or seen[0]() is not grad:
                return True
            if grad._version != seen[1] and not bool(grad.any()):
                return True
        return False

    def _changed(self) -> bool:
        params = self.w.params
        assert self._versions is not None
        if any(p._version != v for p, v in zip(params, self._versions, strict=True)):
            return True
        with torch.no_grad():
            snapshot = self.w.stats._snapshot
            if self._norms is None and snapshot is not None:
                return any(not torch.equal(s, p) for s, p in zip(snapshot, params, strict=True))
            if self._norms is None:
                return False
            now = torch._foreach_norm(params)
            return any(not torch.equal(a, b) for a, b in zip(now, self._norms, strict=True))
