"""What gradwatch puts on a watched model leaves ``torch.save(model)`` and
``copy.deepcopy(model)`` as they are without it: nothing of gradwatch is pickled, so a
model saved whole loads with ``torch.load(weights_only=True)`` and without gradwatch.

* Forward hooks: a module's (empty) hook dict is replaced by a :class:`HookDict`, an
  ``OrderedDict`` that pickles as a plain ``OrderedDict`` without gradwatch's entries. A
  dict that already holds the script's hooks is left alone (their handles point to it);
  such a model saved whole still carries gradwatch's hooks.
* ``zero_grad``: seen through one wrapper of ``nn.Module.zero_grad`` (the class
  attribute, reference-counted), not an attribute on the model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle


class HookDict(OrderedDict[int, Any]):
    """A module's hook dict that pickles and deep-copies without gradwatch's hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.ours: set[int] = set()

    def __reduce__(self) -> tuple[Any, tuple[()], None, None, Iterator[tuple[int, Any]]]:
        kept = [(k, v) for k, v in self.items() if k not in self.ours]
        return (OrderedDict, (), None, None, iter(kept))


def _portable(module: nn.Module, attr: str) -> HookDict | None:
    hooks = module.__dict__.get(attr)
    if isinstance(hooks, HookDict):
        return hooks
    if isinstance(hooks, OrderedDict) and not hooks:
        fresh = HookDict()
        module.__dict__[attr] = fresh
        return fresh
    return None


def forward_pre_hook(module: nn.Module, hook: Callable[..., Any]) -> RemovableHandle:
    """``module.register_forward_pre_hook(hook, with_kwargs=True)``, left out of pickles."""
    hooks = _portable(module, "_forward_pre_hooks")
    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    if hooks is not None:
        hooks.ours.add(handle.id)
    return handle


def forward_hook(
    module: nn.Module, hook: Callable[..., Any], *, always_call: bool = False
) -> RemovableHandle:
    """``module.register_forward_hook(hook, always_call=...)``, left out of pickles
    (``always_call``: it runs also when the forward raises)."""
    hooks = _portable(module, "_forward_hooks")
    handle = module.register_forward_hook(hook, always_call=always_call)
    if hooks is not None:
        hooks.ours.add(handle.id)
    return handle


Notes = tuple[Callable[[], Any], Callable[[], Any]]  # called before and after zero_grad
_lock = threading.Lock()
_notes: dict[int, Notes] = {}
_original: Callable[..., Any] | None = None


def _zero_grad(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    original = _original
    assert original is not None, "gradwatch zero_grad wrapper called after removal"
    notes = _notes.get(id(self)) if _notes else None
    if notes is not None:
        notes[0]()
    result = original(self, *args, **kwargs)
    if notes is not None:
        notes[1]()
    return result


def watch_zero_grad(model: nn.Module, before: Callable[[], Any], after: Callable[[], Any]) -> None:
    """Call ``before``/``after`` around every ``model.zero_grad()``."""
    global _original
    with _lock:
        if _original is None:
            _original = torch.nn.Module.zero_grad
            torch.nn.Module.zero_grad = _zero_grad  # type: ignore[method-assign]
        _notes[id(model)] = (before, after)


def unwatch_zero_grad(model: nn.Module) -> None:
    """Undo :func:`watch_zero_grad`; the last one restores ``nn.Module.zero_grad``."""
    global _original
    with _lock:
        _notes.pop(id(model), None)
        if not _notes and _original is not None and torch.nn.Module.zero_grad is _zero_grad:
            torch.nn.Module.zero_grad = _original  # type: ignore[method-assign]
            _original = None
