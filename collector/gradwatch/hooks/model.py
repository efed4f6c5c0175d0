"""Hooks on the watched models: forward timing, the batch checksum, the NaN-origin capture
(:mod:`gradwatch.nan.origin`, called from the same hooks) and ``zero_grad``.
What they put on a model stays out of ``torch.save(model)`` (:mod:`gradwatch.session.portable`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from gradwatch.hooks.module_runs import ModuleRuns
from gradwatch.session import portable
from gradwatch.stats import batch_checksum as batch

if TYPE_CHECKING:
    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch


class ModelHooks:
    """Forward pre/post hooks and a ``zero_grad`` wrapper on each watched root module."""

    def __init__(
        self,
        run: HookContext[OptimizerWatch],
        models: Mapping[str, torch.nn.Module],
        watches: list[OptimizerWatch],
    ) -> None:
        self.run = run
        self.models = dict(models)
        self.handles: list[RemovableHandle] = []
        self._wrapped: list[torch.nn.Module] = []  # models whose zero_grad is watched
        self.owners: dict[str, list[OptimizerWatch]] = {}
        for key, model in self.models.items():
            ids = {id(p) for p in model.parameters()}
            self.owners[key] = [w for w in watches if any(id(p) in ids for p in w.params)]
        self._started: dict[str, tuple[float, torch.Tensor | batch.Deferred | None, list[str]]] = {}
        #: which modules ran in forward, for param-no-grad (gradwatch.hooks.module_runs)
        self.runs = ModuleRuns(self.models, watches)

    def attach(self) -> None:
        """Register the hooks on every model."""
        guard = self.run._guard
        for key, model in self.models.items():
            owners = self.owners[key]
            if not owners:
                continue
            # compiler.disable: a model compiled in place (model.compile()) would otherwise
            # trace these hooks into its graph; they stay eager, as in an uncompiled model
            disable = torch.compiler.disable
            pre = disable(guard(self._pre_hook(key), "forward pre-hook"))  # type: ignore[no-untyped-call]
            post = disable(guard(self._post_hook(key), "forward hook"))  # type: ignore[no-untyped-call]
            self.handles.append(portable.forward_pre_hook(model, pre))
            self.handles.append(portable.forward_hook(model, post))
            self._wrap_zero_grad(model, owners)
        self.runs.attach()

    def reached(self, optimizer: int) -> None:
        """A backward pass reached ``optimizer``'s tensors (see :class:`ModuleRuns`)."""
        self.runs.after_backward(optimizer)

    def detach(self) -> None:
        """Remove every hook and restore ``zero_grad``."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.runs.detach()
        for model in self._wrapped:
            portable.unwatch_zero_grad(model)
        self._wrapped.clear()

    def _pre_hook(self, key: str) -> Any:
        want_checksum = self.run._options.batch_checksum
        nan = self.run._nan_origin  # its ``on`` is read per call (benchmarks toggle it)
        started = self._started
        is_grad_enabled = torch.is_grad_enabled
        inspect = batch.inspect
        clock = time.perf_counter
        # every optimizer on the CPU: the I/O thread takes the checksum (batch.Deferred)
        defer = all(w.stats.on_host for w in self.run._watches)
        manual = [w.manual for w in self.owners[key] if w.manual is not None]

        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            for driver in manual:  # parameters updated by hand since the last backward?
                driver.check()
            if not is_grad_enabled():  # evaluation or inference: not a training forward
                return None
            checksum, sig = inspect(args, kwargs, defer=defer) if want_checksum else (None, [])
            started[key] = (clock(), checksum, sig)
            if nan.on:
                nan.before_forward(key, args, kwargs)
            return None

        return hook

    def _post_hook(self, key: str) -> Any:
        nan = self.run._nan_origin
        pop = self._started.pop
        owners = self.owners[key]
        clock = time.perf_counter

        def hook(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
            started = pop(key, None)
            if started is None:
                return
            t0, checksum, sig = started
            took = clock() - t0
            for watch in owners:
                watch.note_forward(checksum, sig, took)
            if nan.on:
                nan.after_forward(key, output)

        return hook

    def _wrap_zero_grad(self, model: torch.nn.Module, owners: list[OptimizerWatch]) -> None:
        def note() -> None:
            for watch in owners:
                watch.note_zero_grad("model")

        def seen() -> None:
            for watch in owners:
                watch.see_grads()

        before = self.run._guard(note, "zero_grad wrapper")
        after = self.run._guard(seen, "zero_grad wrapper")
        portable.watch_zero_grad(model, before, after)
        self._wrapped.append(model)
