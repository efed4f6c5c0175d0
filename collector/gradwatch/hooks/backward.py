"""Sees every backward pass, so that the loss is captured without user code.

``torch.Tensor.backward`` calls ``torch.autograd.backward`` through the module attribute,
so one reference-counted wrapper of that function sees both spellings. After a pass
returns, each listener gets its root tensor (detached: no copy, no sync) and its duration,
and finds out for itself which gradients the pass touched. Nothing about the backward pass
changes; the wrapper is removed when the last listener goes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

#: (the root detached, the pass's duration, the root itself: its graph and leaf state)
Listener = Callable[[torch.Tensor | None, float, torch.Tensor | None], None]

_lock = threading.Lock()
_listeners: list[Listener] = []
#: called with no argument right before each pass (only by runs that hold sparse gradients,
#: which a pass replaces instead of adding to in place: see OptimizerWatch.after_backward)
_before: list[Callable[[], None]] = []
_original: Callable[..., Any] | None = None


def _single(tensors: object) -> torch.Tensor | None:
    if isinstance(tensors, tuple | list) and len(tensors) == 1:
        tensors = tensors[0]
    return tensors if isinstance(tensors, torch.Tensor) else None


def _tapped(tensors: Any, *args: Any, **kwargs: Any) -> Any:
    original = _original
    assert original is not None, "gradwatch backward tap called after removal"
    for before in list(_before):
        before()  # guarded by its run: never raises
    started = time.perf_counter()
    result = original(tensors, *args, **kwargs)
    if _listeners:
        took = time.perf_counter() - started
        tensor = _single(tensors)
        root = tensor.detach() if tensor is not None and tensor.numel() == 1 else None
        for listener in list(_listeners):
            listener(root, took, tensor)  # listeners are guarded by their run: never raise
    return result


def install(listener: Listener) -> None:
    """Add a listener (the first one patches ``torch.autograd.backward``)."""
    global _original
    with _lock:
        if not _listeners:
            if _original is None:
                _original = torch.autograd.backward
            # After an earlier removal that found another wrapper on top of ours, the tap
            # is still in the chain: patching again would make it call itself.
            if torch.autograd.backward is _original:
                torch.autograd.backward = _tapped
        _listeners.append(listener)


def watch_before(fn: Callable[[], None]) -> None:
    """Call ``fn`` right before every pass while the tap is in place (listeners keep it)."""
    with _lock:
        if fn not in _before:
            _before.append(fn)


def unwatch_before(fn: Callable[[], None]) -> None:
    with _lock:
        if fn in _before:
            _before.remove(fn)


def uninstall(listener: Listener) -> None:
    """Remove a listener; the last one restores the original function, unless someone else
    wrapped it after us, in which case the tap stays as a transparent pass-through."""
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)
        if not _listeners and torch.autograd.backward is _tapped:
            torch.autograd.backward = _original  # type: ignore[assignment]
