"""NaN provenance: which module and operation made a step's first non-finite value.

Steady state (nothing non-finite): no per-module work. A forward pre-hook on each watched
root module keeps a reference to the step's inputs (the last ``MAX_FORWARDS``) and the CPU
generator state — on the outermost submodules that ran, for a model whose own forward does
not run (:mod:`gradwatch.hooks.outermost`; an input another of them made is kept detached),
a forward hook tags the outputs' autograd nodes (no reference kept), and
a backward listener keeps the loss's node (its saved tensors are freed by the backward);
on the CPU the optimizer step pre-hook also reads the loss and the gradient norms gradwatch
has already computed (two scalar reads).

When a step turns out non-finite, before its update is applied — in that pre-hook on the
CPU, or wherever a ``raise``/``skip``/``checkpoint`` policy checks the values in real time
— the step is localised once (:mod:`gradwatch.nan.replay`): non-finite parameters, then
non-finite inputs, then a replay of each forward of the step with every call watched,
then a backward; when the model is clean the loss computation outside it is named from
the loss's autograd graph. The result goes into the ``nonfinite-*`` findings as
``details.origin`` and into their message. A streak of non-finite steps is localised at
its first step only. ``GRADWATCH_NAN_ORIGIN=0`` turns all of it off.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import torch

from gradwatch.core import checkids
from gradwatch.hooks import backward as backward_tap
from gradwatch.nan import opcause
from gradwatch.nan.replay import Captured, bad, detached, replay, tensors

if TYPE_CHECKING:
    from torch import nn

    from gradwatch.checks.view import StepView
    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch

MAX_FORWARDS = 4  # forwards (inputs only) kept per model, step and capture point
MAX_LOSSES = 4  # loss nodes kept per step (their saved tensors are freed by backward)
_OUTPUT = "gradwatch_model_output"  # metadata key on the autograd node of a model output
MAX_REPLAYS = 8  # localisations per run: bounds the cost of a run that keeps going NaN
#: why a step was not replayed when no forward of a watched model ran with gradients in it
NO_FORWARD = (
    "the watched model's own forward() did not run in this step and the submodules that "
    "do run were not known yet (training code that calls them directly, as a "
    "LightningModule's training_step calling self.net(x) does, is captured on them from "
    "their second training step on), so there was nothing to replay"
)
#: why not, when the model trains while none of its modules is called through __call__
NO_HOOKS = (
    "no module of the watched model was called through its __call__ in this step (a "
    "forward() called as a method, as self.forward(x) does, runs no module hooks), so "
    "there was no forward to capture or replay; calling the module, self(x), localises it"
)
_RISKY = ("Log", "Div", "Exp", "Pow", "Sqrt", "Rsqrt", "Reciprocal", "Xlogy", "Acos", "Asin")


class NanOrigin:
    """The provenance of the first non-finite value of each streak, per optimizer."""

    def __init__(self, run: HookContext[OptimizerWatch]) -> None:
        self.run = run
        self.on = run.options.nan_origin
        self.models: dict[str, nn.Module] = dict(run.model_hooks.models)
        self.handles: list[Any] = []
        self.forwards: dict[str, deque[Captured]] = {}
        self._points: dict[str, int] = {}  # per model: capture points, when not its root
        self.losses: deque[Any] = deque(maxlen=MAX_LOSSES)
        self.epoch = 0  # optimizer steps so far: forwards of an older epoch are dropped
        self._epochs: dict[str, int] = {}
        self.thread: int | None = None  # the training thread (runs the forwards)
        self.cache: dict[tuple[int, int], dict[str, Any]] = {}
        self.streak: dict[int, tuple[int, int]] = {}  # optimizer -> (first bad, last bad)
        self.replays = 0
        self._listener = run.guard(self._after_backward, "NaN origin backward listener")

    # -- hooks ------------------------------------------------------------------------------
    def attach(self) -> None:
        """Start listening to backward passes. The forward and step work is called by the
        hooks gradwatch already has (:class:`~gradwatch.hooks.model.ModelHooks` and
        :class:`~gradwatch.hooks.optimizer.OptimizerWatch`): no hook of its own per forward or
        step, so the steady state costs no extra hook dispatch."""
        if self.on:
            backward_tap.install(self._listener)

    def detach(self) -> None:
        """Remove every hook and drop the references to the last inputs."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        backward_tap.uninstall(self._listener)
        self.forwards.clear()
        self.losses.clear()

    def spread(self, key: str, points: int) -> None:
        """Model ``key``'s capture moved to ``points`` submodules (its root does not run)."""
        self._points[key] = max(1, points)

    def before_forward(
        self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any], module: str | None = None
    ) -> None:
        """A training forward of model ``key`` (of its submodule ``module``) starts: keep
        its inputs and the generator state (called by the forward pre-hook of the model or
        of that submodule, with gradients enabled)."""
        kept = self.forwards.get(key)
        if kept is None or self._epochs.get(key) != self.epoch:
            kept = deque(maxlen=MAX_FORWARDS * self._points.get(key, 1))
            self.forwards[key] = kept
            self._epochs[key] = self.epoch
        self.thread = threading.get_ident()
        cuda = None
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if first is None:
            first = next((t for _, t in tensors((args, kwargs))), None)
        if first is not None and first.is_cuda:  # a C attribute: no device object made
            index = first.device.index or 0
            cuda = (index, torch.cuda.get_rng_state(index))
        rng = torch.get_rng_state()
        if module is None:
            kept.append(Captured(args, dict(kwargs), rng, cuda))
            return
        given = [*tensors(args, "args"), *tensors(kwargs, "kwargs")]
        derived = frozenset(p for p, t in given if t.grad_fn is not None)
        args, kwargs = detached(args), detached(kwargs)
        kept.append(Captured(args, dict(kwargs), rng, cuda, module, derived))

    def after_forward(self, key: str, output: Any) -> None:
        """Tag the outputs' autograd nodes (no reference kept: the graph is not held)."""
        if isinstance(output, torch.Tensor):
            _tag(output.grad_fn, key)
            return
        for _, t in tensors(output):
            _tag(t.grad_fn, key)

    def _after_backward(
        self, root: torch.Tensor | None, took: float, tensor: torch.Tensor | None
    ) -> None:
        graph = None if tensor is None else tensor.grad_fn
        if graph is not None:
            self.losses.append(graph)

    def stepped(self) -> None:
        """An optimizer step was taken (called at the end of its post-hook)."""
        self.epoch += 1
        self.losses.clear()

    def screen(self, w: OptimizerWatch) -> None:
        """Before ``w``'s update on the CPU: localise a non-finite loss or gradient now,
        while the parameters are still those that produced it (called at the end of the
        step pre-hook; on accelerators only a raise/skip/checkpoint policy looks now)."""
        if not self.on or w.stats.device.type != "cpu":
            return
        loss = w.pending.loss
        pre = w._pre  # the gradient norms gradwatch just checked (``w.screened``)
        if (loss is None or math.isfinite(float(loss))) and (pre is None or pre.finite):
            return
        self.locate(w, w.step + 1)

    def rng_before_forward(self) -> dict[str, Any] | None:
        """The CPU generator state at the current step's first training forward."""
        for key, kept in self.forwards.items():
            if kept and self._epochs.get(key) == self.epoch and kept[0].rng is not None:
                return {"torch": kept[0].rng}
        return None

    # -- localisation -----------------------------------------------------------------------
    def origin(
        self, check: str, v: StepView, tensor: int | None = None, before: float | None = None
    ) -> dict[str, Any] | None:
        """``details.origin`` for a ``nonfinite-*`` finding of step ``v.step`` (called by the
        numerics checks, in the training thread or on the writer thread)."""
        if not self.on:
            return None
        found = self.cache.get((v.optimizer, v.step))
        if found is not None:
            return found
        if check == checkids.NONFINITE_PARAM and tensor is not None:
            return self._update_origin(v, tensor, before)
        w = self.run.watches[v.optimizer]
        if threading.get_ident() == self.thread and v.step == w.step + 1:
            return self.locate(w, v.step)
        return {
            "found": False,
            "step": v.step,
            "reason": "the values were checked after the update (policy warn or record on an "
            "accelerator); set nonfinite-loss/nonfinite-grad to raise, skip or checkpoint to "
            "localise before the update",
        }

    def locate(self, w: OptimizerWatch, step: int) -> dict[str, Any]:
        """Localise step ``step`` of ``w`` (before its update) once; cached."""
        key = (w.index, step)
        if key in self.cache:
            return self.cache[key]
        first, last = self.streak.get(w.index, (-2, -2))
        self.streak[w.index] = (first if last == step - 1 else step, step)
        if last == step - 1 and (w.index, first) in self.cache:
            origin = {**self.cache[(w.index, first)], "streak_from": first}
        elif self.replays >= MAX_REPLAYS:
            origin = {"found": False, "step": step, "reason": f"over {MAX_REPLAYS} localisations"}
        else:
            self.replays += 1
            origin = self._localise(w, step)
        self.cache[key] = origin
        return origin

    def _localise(self, w: OptimizerWatch, step: int) -> dict[str, Any]:
        keys = [k for k in w.model_keys if k in self.models]
        try:
            origin = self._parameters(keys) or self._replays(keys) or self._loss_side(keys)
        except Exception as exc:  # localising must never break training
            origin = {"found": False, "reason": f"replay failed ({type(exc).__name__}: {exc})"}
        origin = {"found": True, **origin} if "found" not in origin else origin
        origin["step"] = step
        self._name_module(origin)
        origin["summary"] = opcause.summary(origin)
        return origin

    def _parameters(self, keys: list[str]) -> dict[str, Any] | None:
        for key in keys:
            model = self.models[key]
            # buffers are left out: BatchNorm's statistics turn NaN in this very forward
            for name, t in model.named_parameters():
                if bad(t):
                    module = _prefixed(key, name.rpartition(".")[0])
                    return {
                        "phase": "parameter",
                        "module": module,
                        "tensor": _prefixed(key, name),
                        "cause": "this tensor already held non-finite values before the step "
                        "(made so by an earlier update)",
                        "inputs": [opcause.value_range(t)],
                    }
        return None

    def _replays(self, keys: list[str]) -> dict[str, Any] | None:
        if not any(self.forwards.get(k) for k in keys):
            hookless = any(self.run.model_hooks.hookless(k) for k in keys)
            return {"found": False, "reason": NO_HOOKS if hookless else NO_FORWARD}
        for key in keys:
            for i, c in enumerate(self.forwards.get(key, ())):
                given = [*tensors(c.args, "args"), *tensors(c.kwargs, "kwargs")]
                inputs = [(p, t) for p, t in given if bad(t) and p not in c.derived]
                model = self.models[key]
                if c.module:
                    model = model.get_submodule(c.module)
                found = replay(model, f"{_prefixed(key, c.module)}." if key or c.module else "", c)
                if found is None and not inputs:
                    continue
                found = found or {"module": None, "op": None}
                if inputs:
                    path, t = inputs[0]
                    found["phase"] = "input"
                    found["cause"] = f"the input batch holds non-finite values (argument {path})"
                    found["batch"] = {"argument": path, **opcause.value_range(t)}
                return {**found, "forward": i}
        return None

    def _loss_side(self, keys: list[str]) -> dict[str, Any]:
        """The model is finite forward and backward: the loss computation made it."""
        path = next((p for g in reversed(self.losses) if (p := _path(g, set(keys)))), [])
        risky = [n for n in path if n.startswith(_RISKY)]
        return {
            "phase": "loss",
            "module": None,
            "op": None,
            "autograd_node": (risky or path)[0] if path else None,
            "loss_ops": path,
            "cause": "the model's output is finite: an operation of the loss computation "
            "outside the model made the first non-finite value",
        }

    def _update_origin(self, v: StepView, i: int, before: float | None) -> dict[str, Any]:
        """``nonfinite-param`` with finite gradients: the update itself overflowed."""
        assert v.grad_norm is not None
        opt = type(self.run.watches[v.optimizer].optimizer).__name__
        grad = float(v.grad_norm[i])
        origin: dict[str, Any] = {
            "found": True,
            "step": v.step,
            "phase": "update" if math.isfinite(grad) else "backward",
            "module": v.names[i].rpartition(".")[0],
            "tensor": v.names[i],
            "op": f"{opt}.step",
            "cause": f"the optimizer update (lr {v.lr[v.group_of[i]]:.3g}) overflowed"
            if math.isfinite(grad)
            else "its gradient was already non-finite at this step",
            "grad_norm": grad,
            "param_norm_before": before,
            "lr": v.lr[v.group_of[i]],
        }
        self._name_module(origin)
        origin["summary"] = opcause.summary(origin)
        self.cache[(v.optimizer, v.step)] = origin
        return origin

    def _name_module(self, origin: dict[str, Any]) -> None:
        name = origin.get("module")
        if not isinstance(name, str):
            return
        for key, model in self.models.items():
            prefix = f"{key}." if key else ""
            if key and name != key and not name.startswith(prefix):
                continue
            try:
                sub = model.get_submodule(name[len(prefix) :] if name != key else "")
            except AttributeError:
                continue
            origin["module_type"] = type(sub).__name__
            return


def _tag(node: Any, key: str) -> None:
    if node is not None:
        node.metadata[_OUTPUT] = key


def _prefixed(key: str, name: str) -> str:
    return f"{key}.{name}" if key and name else key or name


def _path(root: Any, keys: set[str], limit: int = 4096) -> list[str]:
    """Node names from the consumer of an output of the models ``keys`` up to the loss
    (forward order)."""
    parent: dict[int, Any] = {id(root): None}
    queue = deque([root])
    while queue and len(parent) < limit:
        node = queue.popleft()
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is None or id(nxt) in parent:
                continue
            parent[id(nxt)] = node
            if nxt.metadata.get(_OUTPUT) in keys:
                names, at = [], node
                while at is not None:
                    names.append(at.name())
                    at = parent[id(at)]
                return names
            queue.append(nxt)
    return []
