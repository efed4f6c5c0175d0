"""Hooks on the watched models: forward timing, the batch checksum, the NaN-origin capture
(:mod:`gradwatch.nan.origin`, called from the same hooks), the autocast state a training
forward ran under (for the structure signature, :mod:`gradwatch.hooks.structure_probe`) and
``zero_grad``.
What they put on a model stays out of ``torch.save(model)`` (:mod:`gradwatch.session.portable`).

The capture hooks go on each watched root module. A model whose own ``forward()`` does not
run in training (its submodules are called directly) has its capture moved to the
outermost submodules that do run (:mod:`gradwatch.hooks.outermost`): there only the inputs
that enter from outside the trained computation (no autograd history) count as the batch,
since a submodule's input made by another one (``head(backbone(x))``) changes with every
update.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from gradwatch.hooks import loaders
from gradwatch.hooks.inputgrad import for_input
from gradwatch.hooks.module_runs import ModuleRuns
from gradwatch.hooks.outermost import Probe, in_backward
from gradwatch.hooks.structure_probe import DEVICE_EVERY, autocast_state
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
        self._fed: set[str] = set()  # models whose root ran a training forward
        #: per optimizer: its models not yet known to run their root in training
        self._unknown: dict[int, list[str]] = {}
        self._probes: dict[str, Probe] = {}  # models whose next training forward is probed
        self._probed_at: dict[str, int] = {}  # the backward pass each probe started at
        #: per model whose root does not run: the submodules that carry its capture
        self.moved: dict[str, list[str]] = {}

    def attach(self) -> None:
        """Register the hooks on every model."""
        guard = self.run.guard
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
            for watch in owners:
                self._unknown.setdefault(watch.index, []).append(key)
        self.runs.attach()

    def reached(self, optimizer: int) -> None:
        """A backward pass reached ``optimizer``'s tensors (see :class:`ModuleRuns`); the
        first one decides whether its models' capture stays on their root."""
        self.runs.after_backward(optimizer)
        if self._probes:
            self._end_probes()
        if self._unknown:
            for key in self._unknown.pop(optimizer, ()):
                self._decide(key)

    def _decide(self, key: str) -> None:
        """A backward pass reached model ``key``'s trained parameters for the first time:
        without a training forward of its root before it, probe the next one."""
        if key in self._fed or key in self._probes or key in self.moved:
            return
        trained = {id(p) for w in self.owners[key] for p in w.params if p.requires_grad}
        probe = Probe(self.models[key], trained, lambda name: self._capture(key, name))
        self._probes[key] = probe  # also without hooks (no submodule): says hookless()
        self._probed_at[key] = self.run.passes

    def hookless(self, key: str) -> bool:
        """Whether a backward pass reached model ``key``'s parameters after its probe
        started, while none of its modules was called through ``__call__`` (its forward
        called as a method, ``self.forward(x)``, runs no module hook)."""
        probe = self._probes.get(key)
        return probe is not None and not probe.saw and self.run.passes > self._probed_at[key]

    def _end_probes(self) -> None:
        """A backward pass after a probed forward: keep the capture on the outermost
        submodules that ran (unless the root ran after all), and take the probe off."""
        for key, probe in list(self._probes.items()):
            if not probe.saw and key not in self._fed:
                continue  # no training forward of the model yet: probe the next one
            probe.remove()
            del self._probes[key]
            if key in self._fed:
                continue
            for module, pre, post in probe.found.values():
                self.handles.append(portable.forward_pre_hook(module, pre))
                self.handles.append(portable.forward_hook(module, post))
            self.moved[key] = list(probe.found)

    def _capture(self, key: str, name: str) -> tuple[Any, Any]:
        """The capture hooks of submodule ``name`` of model ``key`` (its root does not run)."""
        self.run.nan_origin.spread(key, len(self._probes[key].found) + 1)
        guard, disable = self.run.guard, torch.compiler.disable
        pre = disable(guard(self._pre_hook(key, name), "forward pre-hook"))  # type: ignore[no-untyped-call]
        post = disable(guard(self._post_hook(key, name), "forward hook"))  # type: ignore[no-untyped-call]
        return pre, post

    def detach(self) -> None:
        """Remove every hook and restore ``zero_grad``."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        for probe in self._probes.values():
            probe.remove()
        self._probes.clear()
        self._unknown.clear()
        self.runs.detach()
        for model in self._wrapped:
            portable.unwatch_zero_grad(model)
        self._wrapped.clear()

    def _pre_hook(self, key: str, sub: str | None = None) -> Any:
        """The capture pre-hook of model ``key``'s root, or of its submodule ``sub``."""
        if sub is not None:
            return self._sub_pre_hook(key, sub)
        want_checksum = self.run.options.batch_checksum
        nan = self.run.nan_origin  # its ``on`` is read per call (benchmarks toggle it)
        started = self._started
        is_grad_enabled = torch.is_grad_enabled
        inspect = batch.inspect
        clock = time.perf_counter
        follow, given = loaders.LOG, loaders.given
        # every optimizer on the CPU: the I/O thread takes the checksum (batch.Deferred)
        defer = all(w.stats.on_host for w in self.run.watches)
        owners = self.owners[key]
        owner = owners[0].index if owners else 0
        manual = [w.manual for w in owners if w.manual is not None]
        params = self._tensor_ids(key)

        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            for driver in manual:  # parameters updated by hand since the last backward?
                driver.check()
            if not is_grad_enabled():  # evaluation or inference: not a training forward
                return None
            if for_input(args, kwargs, params):  # a pass for delta.grad (inputgrad)
                for watch in owners:
                    watch.for_input = True
            checksum, sig = inspect(args, kwargs, defer=defer) if want_checksum else (None, [])
            if follow.drawn:  # a loader's batch kept and fed again? (inputs followed)
                given(args, kwargs, owner)
            started[key] = (clock(), checksum, sig)
            if nan.on:
                nan.before_forward(key, args, kwargs)
            return None

        return hook

    def _tensor_ids(self, key: str) -> set[int]:
        """Ids of model ``key``'s parameters and of every tensor its optimizers hold: an
        input that requires a gradient and reaches none of them is a pass for that input
        (:mod:`gradwatch.hooks.inputgrad`)."""
        ids = {id(p) for p in self.models[key].parameters()}
        ids.update(id(p) for w in self.owners[key] for p in w.params)
        return ids

    def _sub_pre_hook(self, key: str, sub: str) -> Any:
        """The capture pre-hook of submodule ``sub`` of a model whose root does not run:
        the batch is the inputs that enter from outside the trained computation."""
        want_checksum = self.run.options.batch_checksum
        nan = self.run.nan_origin
        started = self._started
        defer = all(w.stats.on_host for w in self.run.watches)
        owners = self.owners[key]
        manual = [w.manual for w in owners if w.manual is not None]
        point = f"{key}/{sub}"  # no module name holds a slash
        follow, given = loaders.LOG, loaders.given
        owner = owners[0].index if owners else 0
        params = self._tensor_ids(key)

        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            for driver in manual:
                driver.check()
            if not torch.is_grad_enabled() or key in started or in_backward():
                return None  # not training, inside the root's capture, or a recomputation
            if for_input(args, kwargs, params):
                for watch in owners:
                    watch.for_input = True
            checksum, sig = (
                batch.inspect(args, kwargs, defer=defer, leaves_only=True)
                if want_checksum
                else (None, [])
            )
            if follow.drawn:
                given(args, kwargs, owner)
            started[point] = (time.perf_counter(), checksum, sig)
            if nan.on:
                nan.before_forward(key, args, kwargs, sub)
            return None

        return hook

    def _post_hook(self, key: str, sub: str | None = None) -> Any:
        """The capture post-hook of model ``key``'s root, or of its submodule ``sub``."""
        nan = self.run.nan_origin
        pop = self._started.pop
        owners = self.owners[key]
        fed = self._fed
        clock = time.perf_counter
        point = key if sub is None else f"{key}/{sub}"
        root = sub is None
        first = next((p for w in owners for p in w.params), None)
        device_type, forwards = "cpu", 0  # the first parameter's, as last looked at; forwards

        def hook(module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> None:
            nonlocal device_type, forwards
            started = pop(point, None)
            if started is None:
                return
            if root:
                fed.add(key)
            t0, checksum, sig = started
            took = clock() - t0
            # still inside the caller's autocast region: one look per training forward
            autocast = None
            if first is not None:
                if forwards % DEVICE_EVERY == 0:
                    device_type = first.device.type
                forwards += 1
                autocast = autocast_state(device_type)
            for watch in owners:
                watch.note_forward(checksum, sig, took, autocast)
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

        before = self.run.guard(note, "zero_grad wrapper")
        after = self.run.guard(seen, "zero_grad wrapper")
        portable.watch_zero_grad(model, before, after)
        self._wrapped.append(model)
