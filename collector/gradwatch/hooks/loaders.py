"""Logs how the program uses its DataLoaders, for ``repeated-batch``
(:mod:`gradwatch.checks.repeated`): per iterator, the loader's length in batches, how many
batches it yielded, whether it reached its end, and the optimizer steps it fed.

One wrapper of ``_BaseDataLoaderIter.__next__`` (the class every DataLoader iterator
derives from), reference-counted: installed by ``gradwatch run`` at process start (so a
batch drawn before the loop is seen too) and by every run while it is open. Per batch it
costs one dictionary look-up and a few attribute writes; the first batch of an iterator
adds a record. Batches drawn with gradients disabled (evaluation) are not logged.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import dataloader

from gradwatch.checks.repeated import IteratorRecord, LoaderLog

#: the log of this process (a run reads it through its check engine)
LOG = LoaderLog()

_lock = threading.Lock()
_holders = 0
_original: Callable[..., Any] | None = None
_records: weakref.WeakKeyDictionary[Any, IteratorRecord] = weakref.WeakKeyDictionary()
#: the optimizer step a batch drawn now is for (set by the open run), None: no run
_step: Callable[[], int] | None = None
#: tensors of fewer elements are not followed (a batch of one or two samples repeats its
#: labels by chance)
MIN_LABELS = 8


def _length(it: Any) -> int | None:
    try:
        return len(it)
    except Exception:  # an iterable dataset without a length
        return None


def _batch_addresses(data: Any) -> list[tuple[int, Callable[[], object]]]:
    """Storage addresses of the CPU tensors of a batch (its inputs and labels; at most two
    levels of tuples, lists and dicts, eight entries each) with weak references to them: a
    few attribute reads, no copy."""

    def entries(obj: Any) -> list[Any]:
        if isinstance(obj, dict):
            return list(obj.values())[:8]
        return list(obj[:8]) if isinstance(obj, tuple | list) else [obj]

    out: list[tuple[int, Callable[[], object]]] = []
    for item in entries(data):
        for t in entries(item) if isinstance(item, tuple | list | dict) else [item]:
            if (
                isinstance(t, torch.Tensor)
                and t.dtype != torch.bool
                and t.is_cpu
                and t.numel() >= MIN_LABELS
            ):
                out.append((t.data_ptr(), weakref.ref(t)))
    return out


def used(target: Any) -> None:
    """A classification loss was given ``target``: when a loader yielded that tensor for an
    earlier step, the check hears of it (CPU labels: a data_ptr read; never a value)."""
    source = _step
    if source is None or not LOG.drawn or not isinstance(target, torch.Tensor):
        return  # no loader has yielded a batch to follow (batches made by the program itself)
    if target.is_cpu:
        LOG.used(source(), target.data_ptr())


def given(args: tuple[Any, ...], kwargs: dict[str, Any], owner: int) -> None:
    """A watched model's training forward was given ``args`` and ``kwargs`` (``owner``: the
    index of its first optimizer): with two or more tensors among them, each CPU tensor
    that a loader yielded is followed as :func:`used` follows labels. (A forward of one
    tensor needs no following: a kept batch repeats its checksum. Beside another tensor
    that changes, such as a diffusion model's fresh noise, it does not.)"""
    source = _step
    if source is None or not LOG.drawn:
        return
    tensors = [t for t in (*args[:4], *list(kwargs.values())[:4]) if isinstance(t, torch.Tensor)]
    if len(tensors) < 2:
        return
    step = source()
    for t in tensors:
        if t.is_cpu:
            LOG.used(step, t.data_ptr(), "input", owner)


def _let_go(record: IteratorRecord) -> None:
    """The program let go of ``record``'s iterator: stamp the step (a finaliser: never
    raises into the program)."""
    try:
        source = _step
        record.dropped = source() if source is not None else 1
    except Exception:
        pass


def _drawn(it: Any, exhausted: bool, data: Any = None) -> None:
    yielded = getattr(it, "_num_yielded", None)
    if not isinstance(yielded, int):
        return
    record = _records.get(it)
    if not exhausted and yielded == 1:  # the first batch of a pass (persistent workers:
        record = None  # the iterator object is reused, its count starts again)
        if torch.is_grad_enabled():
            source = _step
            step = source() if source is not None else 1
            record = IteratorRecord(_length(it), step, step, before_run=source is None)
            _records[it] = record
            weakref.finalize(it, _let_go, record).atexit = False
            LOG.add(record)
        else:
            _records.pop(it, None)
    if not exhausted and data is not None and torch.is_grad_enabled():
        addresses = _batch_addresses(data)
        if addresses:  # before any run (gradwatch run opens one at the first forward): step 1
            stamp = _step
            LOG.drew(stamp() if stamp is not None else 1, addresses, before_run=stamp is None)
    if record is None:
        return
    if exhausted:
        record.exhausted = True
        return
    record.yielded = yielded
    source = _step
    record.last = source() if source is not None else 1


def _noted(it: Any, exhausted: bool, data: Any = None) -> None:
    """:func:`_drawn`, which must never break the user's loop."""
    try:  # noqa: SIM105 - a plain try costs nothing per batch; a context manager does
        _drawn(it, exhausted, data)
    except Exception:
        pass


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __next__(self: Any) -> Any:  # noqa: N807 - it replaces that method
        try:
            data = original(self)
        except StopIteration:
            _noted(self, True)
            raise
        _noted(self, False, data)
        return data

    __next__.__gradwatch_original__ = original  # type: ignore[attr-defined]
    return __next__


def install() -> None:
    """Hold the wrapper (the first holder puts it in place)."""
    global _holders, _original
    with _lock:
        _holders += 1
        if _holders == 1:
            cls = dataloader._BaseDataLoaderIter
            current = cls.__next__
            if not hasattr(current, "__gradwatch_original__"):
                _original = current
                cls.__next__ = _wrap(current)  # type: ignore[method-assign]


def uninstall() -> None:
    """Release the wrapper (the last holder restores the original, unless someone wrapped
    it again on top)."""
    global _holders, _original
    with _lock:
        _holders = max(0, _holders - 1)
        if _holders == 0 and _original is not None:
            cls = dataloader._BaseDataLoaderIter
            if getattr(cls.__next__, "__gradwatch_original__", None) is _original:
                setattr(cls, "__next__", _original)  # noqa: B010 - a method, typed as such
            _original = None


class LoaderWatch:
    """A run's part: hold the wrapper while the run is open, stamp batches with its steps
    and hand the log to its ``repeated-batch`` check."""

    def __init__(self, step: Callable[[], int], log_to: Any) -> None:
        self._step = step
        self._check = log_to  # the check engine's RepeatedBatch

    def attach(self) -> None:
        global _step
        install()
        LOG.begin_run()
        self._check.log = LOG
        _step = self._stamp

    def _stamp(self) -> int:
        return self._step() + 1

    def detach(self) -> None:
        global _step
        if _step == self._stamp:
            _step = None
        uninstall()
