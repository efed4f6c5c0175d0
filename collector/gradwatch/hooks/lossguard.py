"""Sees element-wise losses called with input and target of different, broadcastable
shapes — ``(N, 1)`` against ``(N,)`` silently becomes an ``(N, N)`` loss.

Wraps the functional losses that broadcast (``nn.MSELoss`` and friends call them through
``torch.nn.functional``), reference-counted like the backward tap; the wrapper only reads
shapes and then calls the original unchanged. A loss function bound before ``watch()``
(``from torch.nn.functional import l1_loss``) escapes that wrapper, so PyTorch's own
broadcast warning is read too: ``warnings.warn`` is wrapped the same way and always calls
the original, whatever the warning filters say.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name every torch user knows

from gradwatch.core.errors import IntegrityError

Listener = Callable[[str, torch.Size, torch.Size, torch.Size], None]
TARGETS = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss")

_lock = threading.Lock()
_listeners: list[Listener] = []
_originals: dict[str, Callable[..., Any]] = {}
_original_warn: Callable[..., Any] | None = None
_WRAPPER_CODES: set[Any] = set()  # the code of the loss wrappers: frames no warning names
_TORCH_WARNING = re.compile(
    r"target size \(torch\.Size\(\[([\d, ]*)\]\)\) that is different to the input size "
    r"\(torch\.Size\(\[([\d, ]*)\]\)\)"
)


def _size(text: str) -> torch.Size:
    return torch.Size(int(x) for x in text.split(",") if x.strip())


def _warn(
    message: Any, category: Any = None, stacklevel: int = 1, *args: Any, **kwargs: Any
) -> Any:
    original = _original_warn
    assert original is not None, "gradwatch warnings tap called after removal"
    if _listeners:
        found = _TORCH_WARNING.search(str(message))
        if found:
            _notify("an element-wise loss", _size(found.group(2)), _size(found.group(1)))
    return original(message, category, _user_level(stacklevel), *args, **kwargs)


def _user_level(stacklevel: int) -> int:
    """The stack level, counted from this module's caller of the original ``warn``, that
    names the frame the warning would name without gradwatch: this tap's own frame and
    any loss wrapper's frame (torch's ``stacklevel=2`` lands there) are stepped over."""
    level = max(stacklevel, 1)
    try:
        frame: Any = sys._getframe(level + 1)  # 0: here, 1: _warn, 2: warn's caller
        while frame is not None and frame.f_code in _WRAPPER_CODES:
            level += 1
            frame = frame.f_back
    except ValueError:  # a stack shallower than the level: as the caller asked
        pass
    return level + 1


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def loss(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            _listeners
            and isinstance(input, torch.Tensor)
            and isinstance(target, torch.Tensor)
            and input.shape != target.shape
        ):
            _notify(name, input.shape, target.shape)
        return original(input, target, *args, **kwargs)

    loss.__gradwatch_original__ = original  # type: ignore[attr-defined]
    _WRAPPER_CODES.add(loss.__code__)  # type: ignore[attr-defined]
    return loss


def _notify(name: str, a: torch.Size, b: torch.Size) -> None:
    try:
        shape = torch.broadcast_shapes(a, b)  # type: ignore[no-untyped-call]
    except RuntimeError:
        return  # not broadcastable: torch raises its own clear error
    for listener in list(_listeners):
        try:
            listener(name, a, b, shape)
        except IntegrityError:
            raise
        except Exception:  # a listener's failure is counted by its run, never the user's
            pass


def install(listener: Listener) -> None:
    """Add a listener (the first one wraps the functional losses)."""
    with _lock:
        if not _listeners:
            for name in TARGETS:
                current = getattr(F, name)
                if not hasattr(current, "__gradwatch_original__"):
                    _originals[name] = current
                    setattr(F, name, _wrap(name, current))
            _tap_warnings()
        _listeners.append(listener)


def _tap_warnings() -> None:
    global _original_warn
    if warnings.warn is not _warn:
        _original_warn = warnings.warn
        warnings.warn = _warn


def uninstall(listener: Listener) -> None:
    """Remove a listener (the last one restores the functions it wrapped, when nobody
    wrapped them again on top)."""
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)
        if not _listeners:
            for name, original in _originals.items():
                if getattr(getattr(F, name), "__gradwatch_original__", None) is original:
                    setattr(F, name, original)
            _originals.clear()
            if warnings.warn is _warn and _original_warn is not None:
                warnings.warn = _original_warn
