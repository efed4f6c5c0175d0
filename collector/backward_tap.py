"""Sees every backward pass, so that the loss is captured without user code.

``torch.Tensor.backward`` calls ``torch.autograd.backward`` through the module attribute,
so one reference-counted wrapper of that function sees both spellings. The wrapper only
remembers the root tensor (detached: no copy, no sync) and times the call; it changes
nothing about the backward pass itself and is removed when the last run closes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class BackwardPass:
    """One call of ``torch.autograd.backward`` in flight."""

    root: torch.Tensor | None
    started: float
    #: called with the pass's duration once it returns (registered by whoever it reached)
    on_done: list[Callable[[float], None]] = field(default_factory=list)


_lock = threading.Lock()
_users = 0
_original: Callable[..., Any] | None = None
_active: list[BackwardPass] = []


def _root_of(tensors: object) -> torch.Tensor | None:
    if isinstance(tensors, tuple | list) and len(tensors) == 1:
        tensors = tensors[0]
    if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
        return tensors.detach()
    return None


def _tapped(tensors: Any, *args: Any, **kwargs: Any) -> Any:
    original = _original
    assert original is not None, "gradwatch backward tap called after removal"
    try:
        current: BackwardPass | None = BackwardPass(_root_of(tensors), time.perf_counter())
        _active.append(current)  # type: ignore[arg-type]
    except Exception:  # never let bookkeeping break the user's backward
        current = None
    try:
        return original(tensors, *args, **kwargs)
    finally:
        if current is not None:
            _finish(current)


def _finish(current: BackwardPass) -> None:
    try:
        _active.remove(current)
        took = time.perf_counter() - current.started
        for callback in current.on_done:
            callback(took)
    except Exception:  # a failing callback is the caller's bug, counted there
        pass


def current_pass() -> BackwardPass | None:
    """The backward pass now running, when exactly one is (hooks of concurrent passes on
    autograd worker threads cannot be attributed, so they get ``None``)."""
    return _active[0] if len(_active) == 1 else None


def install() -> None:
    """Add one user of the tap (the first one patches ``torch.autograd.backward``)."""
    global _users, _original
    with _lock:
        if _users == 0:
            if _original is None:
                _original = torch.autograd.backward
            # After an earlier uninstall that found another wrapper on top of ours, the tap
            # is still in the chain: patching again would make it call itself.
            if torch.autograd.backward is _original:
                torch.autograd.backward = _tapped
        _users += 1


def uninstall() -> None:
    """Remove one user; the last one restores the original function, unless someone else
    wrapped it after us, in which case the tap stays as a transparent pass-through."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0 and torch.autograd.backward is _tapped:
            torch.autograd.backward = _original  # type: ignore[assignment]
