"""Sees gradient clipping, for ``clip-before-backward`` (:mod:`gradwatch.checks.clipping`).

Wraps ``clip_grad_norm_`` and ``clip_grad_value_`` in ``torch.nn.utils`` and
``torch.nn.utils.clip_grad`` (where ``nn.utils.clip_grad_norm_(...)`` and the deprecated
``clip_grad_norm`` find them), reference-counted like the backward tap. The wrapper turns
a generator of parameters into a list (the original makes that list anyway), tells the
listeners which tensors it clips, then calls the original unchanged. Installed by
``gradwatch run`` at process start, so that ``from torch.nn.utils import clip_grad_norm_``
at the top of a script binds the wrapper, and by every run while it is open.

``clip_grad_norm_`` imported by name before ``watch()`` escapes that wrapper, so the
private helper it scales the gradients with (``clip_grad._clip_grads_with_norm_``, looked
up at each call) is wrapped too, where this torch has it; a call that went through the
public wrapper is not told twice. ``clip_grad_value_`` imported by name before ``watch()``
is not seen.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.utils as nn_utils
from torch.nn.utils import clip_grad as clip_module

from gradwatch.core.errors import IntegrityError

if TYPE_CHECKING:
    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch

#: (function name, the tensors it clips, whether the clip has run)
Listener = Callable[[str, Sequence[torch.Tensor], bool], None]
TARGETS = ("clip_grad_norm_", "clip_grad_value_")
#: the helper that ``clip_grad_norm_`` scales the gradients with: (parameters, max_norm, …)
INNER = "_clip_grads_with_norm_"
_MODULES = (clip_module, nn_utils)

_lock = threading.Lock()
_listeners: list[Listener] = []
_holders = 0
_originals: dict[str, Callable[..., Any]] = {}
_inside = threading.local()  # .depth: public wrappers running on this thread


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
        if not _listeners:
            return original(parameters, *args, **kwargs)
        if not isinstance(parameters, torch.Tensor):
            parameters = list(parameters)
        params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
        _notify(name, params, False)
        depth = getattr(_inside, "depth", 0)
        _inside.depth = depth + 1
        try:
            result = original(parameters, *args, **kwargs)
        finally:
            _inside.depth = depth
        _notify(name, params, True)
        return result

    clip.__gradwatch_original__ = original  # type: ignore[attr-defined]
    return clip


def _wrap_inner(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def scale(parameters: Any, *args: Any, **kwargs: Any) -> Any:
        depth: int = getattr(_inside, "depth", 0)
        if not _listeners or depth:
            return original(parameters, *args, **kwargs)
        if not isinstance(parameters, torch.Tensor):
            parameters = list(parameters)
        params = [parameters] if isinstance(parameters, torch.Tensor) else parameters
        _notify("clip_grad_norm_", params, False)
        result = original(parameters, *args, **kwargs)
        _notify("clip_grad_norm_", params, True)
        return result

    scale.__gradwatch_original__ = original  # type: ignore[attr-defined]
    return scale


def _notify(name: str, params: Sequence[Any], done: bool) -> None:
    for listener in list(_listeners):
        try:
            listener(name, params, done)
        except IntegrityError:
            raise
        except Exception:  # a listener's failure is counted by its run, never the user's
            pass


def install(listener: Listener | None = None) -> None:
    """Hold the wrappers (the first holder puts them in place); add ``listener``."""
    global _holders
    with _lock:
        _holders += 1
        if _holders == 1:
            for name in TARGETS:
                current = getattr(clip_module, name)
                if hasattr(current, "__gradwatch_original__"):
                    continue  # left in place by an earlier holder that could not restore it
                _originals[name] = current
                wrapped = _wrap(name, current)
                for module in _MODULES:
                    if getattr(module, name, None) is current:
                        setattr(module, name, wrapped)
            inner = getattr(clip_module, INNER, None)
            if callable(inner) and not hasattr(inner, "__gradwatch_original__"):
                _originals[INNER] = inner
                setattr(clip_module, INNER, _wrap_inner(inner))
        if listener is not None:
            _listeners.append(listener)


def uninstall(listener: Listener | None = None) -> None:
    """Remove ``listener`` and release the wrappers (the last holder restores the
    functions, where nobody replaced them since)."""
    global _holders
    with _lock:
        if listener is not None and listener in _listeners:
            _listeners.remove(listener)
        _holders = max(0, _holders - 1)
        if _holders == 0:
            for name, original in _originals.items():
                for module in _MODULES:
                    current = getattr(module, name, None)
                    if getattr(current, "__gradwatch_original__", None) is original:
                        setattr(module, name, original)
            _originals.clear()


class ClipWatch:
    """A run's part: a clip of a watched optimizer's parameters becomes a ``clip`` event of
    that optimizer's step. Once it has run, the optimizer takes the gradients as they are
    now (a ``grad_modified`` event): clipping scales them in place, which is no clearing (a
    clip after each micro-batch's backward must not read as ``zero_()`` to the next
    backward pass)."""

    def __init__(self, run: HookContext[OptimizerWatch]) -> None:
        self.run = run
        self._ids: list[frozenset[int]] = []
        self._listener = run.guard(self._clipped, "gradient clipping listener")

    def attach(self) -> None:
        self._ids = [frozenset(id(p) for p in w.params) for w in self.run.watches]
        install(self._listener)

    def detach(self) -> None:
        uninstall(self._listener)

    def _clipped(self, name: str, params: Sequence[torch.Tensor], done: bool) -> None:
        for watch, ids in zip(self.run.watches, self._ids, strict=True):
            if any(id(p) in ids for p in params):
                if done:
                    _rescaled(watch)
                else:
                    watch.pending.add(("clip", watch._now(), name))
                    self.run.checks.clips.seen = True


def _rescaled(watch: OptimizerWatch) -> None:
    """Take the new versions of the gradients a clip scaled in place, recorded as the
    in-place edit it is (``grad_modified``, as the step would have found it); a gradient
    replaced or removed since the last look stays a clearing for the optimizer to find."""
    grads = watch._grads
    modified = 0
    for i, p in enumerate(watch.params):
        seen, grad = grads[i], p.grad
        if seen is None or grad is None or seen[0]() is not grad or grad._version == seen[1]:
            continue
        modified += 1
        grads[i] = (seen[0], grad._version)
    if modified:
        watch.pending.add(("grad_modified", watch._now(), f"{modified} tensors"))
