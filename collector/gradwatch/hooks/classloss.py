"""Sees the classification losses of training steps, for ``loss-at-chance``
(:mod:`gradwatch.checks.chance`): ``F.cross_entropy`` (also what ``nn.CrossEntropyLoss``
calls) and ``F.nll_loss`` (``nn.NLLLoss``), reference-counted: wrapped by ``gradwatch run``
at process start (so that ``criterion = F.cross_entropy`` at the top of a script binds the
wrapper) and by every run while it is open. With ``watch()`` called by hand, a loss
function bound by name before it is not seen (``nn.CrossEntropyLoss()`` always is: it looks
``F.cross_entropy`` up at each call).

The wrapper reads shapes and arguments only — the number of classes (dimension 1 of a
batched input, 0 of an unbatched one), the reduction, label smoothing, whether the
target holds probabilities, and whether the input is a softmax's output (the type of its
autograd node) — never a value: no synchronisation. A call with gradients
disabled (evaluation) is not a training loss and is ignored. Per call: a few attribute
reads and one tuple comparison; the listener runs only when the facts change.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name every torch user knows

from gradwatch.checks.chance import LossKind
from gradwatch.hooks import backward, loaders

#: classes, label smoothing, mean reduction, soft target, input made by a softmax, classes
#: that are the batch's own rows (an N x N or N x (N-1) similarity: a contrastive loss)
Facts = tuple[int, float, bool, bool, bool, bool]
SOFTMAX = "SoftmaxBackward0"  # the autograd node of softmax: probabilities, not logits
Listener = Callable[[Facts], None]
TARGETS = ("cross_entropy", "nll_loss")

_lock = threading.Lock()
_listeners: list[Listener] = []
_originals: dict[str, Callable[..., Any]] = {}
_holders = 0
_last: Facts | None = None


def _facts(input: Any, target: Any, kwargs: dict[str, Any]) -> Facts | None:
    if not isinstance(input, torch.Tensor) or not isinstance(target, torch.Tensor):
        return None
    dim = input.dim()
    if dim == 0:
        return None
    classes = int(input.shape[1] if dim >= 2 else input.shape[0])
    smoothing = kwargs.get("label_smoothing", 0.0)
    reduction = kwargs.get("reduction", "mean")
    legacy = kwargs.get("size_average") is not None or kwargs.get("reduce") is not None
    return (
        classes,
        float(smoothing) if isinstance(smoothing, int | float) else 1.0,
        reduction == "mean" and not legacy,
        target.is_floating_point(),
        type(input.grad_fn).__name__ == SOFTMAX,
        dim == 2 and int(input.shape[0]) >= 2 and classes in (input.shape[0] - 1, input.shape[0]),
    )


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def loss(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        global _last
        if _listeners and torch.is_grad_enabled():
            try:
                facts = _facts(input, target, kwargs)
                if args:  # positional weight/size_average/…: not the usual call, not compared
                    facts = None if facts is None else (facts[0], facts[1], False, *facts[3:])
                if facts is not None and facts != _last:
                    _last = facts
                    for listener in list(_listeners):
                        listener(facts)
                if facts is not None and not facts[3] and not facts[5]:  # hard labels
                    loaders.used(target)
            except Exception:  # never break the user's loss
                pass
        return original(input, target, *args, **kwargs)

    loss.__gradwatch_original__ = original  # type: ignore[attr-defined]
    return loss


def install(listener: Listener | None = None) -> None:
    """Hold the wrappers (the first holder puts them in place); add ``listener``."""
    global _holders, _last
    with _lock:
        _holders += 1
        if _holders == 1:
            for name in TARGETS:
                current = getattr(F, name)
                if not hasattr(current, "__gradwatch_original__"):
                    _originals[name] = current
                    setattr(F, name, _wrap(current))
        if listener is not None:
            _listeners.append(listener)
            _last = None  # the new listener hears the next call's facts


def uninstall(listener: Listener | None = None) -> None:
    """Remove ``listener`` and release the wrappers (the last holder restores the
    functions, where nobody wrapped them again on top)."""
    global _holders, _last
    with _lock:
        if listener is not None and listener in _listeners:
            _listeners.remove(listener)
        _holders = max(0, _holders - 1)
        if _holders == 0:
            for name, original in _originals.items():
                if getattr(getattr(F, name), "__gradwatch_original__", None) is original:
                    setattr(F, name, original)
            _originals.clear()
            _last = None


class ClassLossWatch:
    """A run's part: tells its ``loss-at-chance`` check what the classification loss is."""

    def __init__(
        self, kind: LossKind, guard: Callable[..., Any], models: list[torch.nn.Module] | None = None
    ) -> None:
        self.kind = kind
        self._models = models or []
        self._listener = guard(self._noted, "classification loss listener")
        self._root = guard(self._on_backward, "classification loss root listener")

    def attach(self) -> None:
        install(self._listener)
        backward.install(self._root)

    def detach(self) -> None:
        backward.uninstall(self._root)
        uninstall(self._listener)

    def _on_backward(self, _root: Any, _took: float, tensor: torch.Tensor | None) -> None:
        """The type of the pass's root node (one attribute read): is the step's loss the
        classification loss itself?"""
        node = None if tensor is None else tensor.grad_fn
        self.kind.root(None if node is None else type(node).__name__)

    def _noted(self, facts: Facts) -> None:
        """The facts of a loss call that differ from the call before. A call while every
        watched model is in eval mode is an evaluation with gradients on (a test pass that
        forgot ``no_grad``), not the training loss: what it sums or how is not the run's."""
        if self._models and not any(m.training for m in self._models):
            return
        self.kind.note(*facts)
