"""Finds a run's ``torch.amp.GradScaler`` by itself, so that ``scaler=`` is optional.

A GradScaler that finds inf/NaN gradients skips ``optimizer.step()``; without knowing the
scaler, gradwatch would see nothing of those steps (and would record the *scaled* loss).
While a run without ``scaler=`` is open, ``GradScaler.scale`` (the class attribute, wrapped
once per process) hands every enabled scaler it sees to the open runs that have none yet:
each then wraps that scaler's ``update`` (:class:`~gradwatch.checks.amp.ScalerWatch`,
``amp-overflow``) and divides the recorded loss by the scale. The wrapper costs one Python
call per ``scale()``; the class is restored when no run needs it any more.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any

import torch

from gradwatch.checks.amp import ScalerWatch

if TYPE_CHECKING:
    from gradwatch.session.handle import Run

_waiting: weakref.WeakSet[Run] = weakref.WeakSet()
_lock = threading.Lock()
_original: Any = None


def install(run: Run) -> None:
    """Let ``run`` adopt the first GradScaler used while it is open."""
    global _original
    if run._scaler_watch is not None:
        return
    with _lock:
        _waiting.add(run)
        if _original is None:
            _original = torch.amp.GradScaler.scale
            torch.amp.GradScaler.scale = _wrap(_original)  # type: ignore[method-assign]


def _wrap(original: Any) -> Any:
    @functools.wraps(original)
    def scale(self: torch.amp.GradScaler, outputs: Any) -> Any:
        if _waiting:
            _adopt(self)
        return original(self, outputs)

    return scale


def _adopt(scaler: torch.amp.GradScaler) -> None:
    global _original
    with _lock:
        runs = list(_waiting)
        for run in runs:
            if run.closed or run._scaler_watch is not None:
                _waiting.discard(run)
            elif scaler.is_enabled():
                run._guard(_attach, "GradScaler detection")(run, scaler)
                _waiting.discard(run)
        if not _waiting and _original is not None:
            torch.amp.GradScaler.scale = _original  # type: ignore[method-assign]
            _original = None


def _attach(run: Run, scaler: torch.amp.GradScaler) -> None:
    run._options = dataclasses.replace(run._options, scaler=scaler)  # the loss is unscaled
    watch = ScalerWatch(
        scaler,
        [w.optimizer for w in run._watches],
        run._sink,
        lambda: run.step,
        run._guard,
        run._scaler_updated,
    )
    watch.attach()
    run._scaler_watch = watch
