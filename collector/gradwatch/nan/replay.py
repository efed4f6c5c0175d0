"""Re-runs one training forward (and a backward) of a watched model to find where the first
non-finite value was made: the module, the operation, and the values that led there.

Used by :mod:`gradwatch.nan.origin` once a step turned out non-finite, before its update
is applied, so the parameters are still the ones that produced it. During the replay
every torch function call is watched (a ``TorchFunctionMode``), every submodule has
forward hooks, and every autograd node made by a watched call has a hook; all of it is
removed afterwards. The replay leaves training as it was: gradients are computed with
``torch.autograd.grad`` (``.grad`` is untouched), buffers (BatchNorm statistics) and the
RNG states are restored, and the root module's own hooks do not run.
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradwatch.nan import opcause

_HERE = str(Path(__file__).parents[1])  # the gradwatch package: its frames are not the op
_TORCH = str(Path(torch.__file__).parent)


@dataclass
class Captured:
    """One training forward pass of a watched model, as seen by its root pre-hook."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    rng: torch.Tensor | None  # CPU generator state before the forward
    cuda_rng: tuple[int, torch.Tensor] | None  # (device index, state) when on an accelerator
    module: str = ""  # the submodule called, when the model's own forward does not run
    derived: frozenset[str] = frozenset()  # paths of inputs another module made (detached)


def detached(obj: Any, depth: int = 0) -> Any:
    """``obj`` with every tensor that autograd made detached (same storage, no graph kept),
    through nested tuples, lists and dicts as :func:`tensors` walks them; a container with
    no such tensor is returned as it is."""
    if isinstance(obj, torch.Tensor):
        return obj.detach() if obj.grad_fn is not None else obj
    if depth < 4 and isinstance(obj, tuple | list):
        items = [detached(item, depth + 1) for item in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            return obj
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if depth < 4 and isinstance(obj, dict):
        found = {key: detached(value, depth + 1) for key, value in obj.items()}
        return obj if all(found[k] is obj[k] for k in obj) else found
    return obj


def tensors(obj: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor in nested tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif depth < 4 and isinstance(obj, tuple | list):
        for i, item in enumerate(obj):
            yield from tensors(item, f"{path}[{i}]", depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for key in list(obj)[:64]:
            yield from tensors(obj[key], f"{path}[{key!r}]", depth + 1)


def bad(t: torch.Tensor) -> bool:
    """Whether a floating tensor holds NaN or ±Inf."""
    return t.is_floating_point() and t.numel() > 0 and not bool(torch.isfinite(t).all())


def _user_frame() -> str | None:
    """``file:line in function`` of the innermost frame outside torch and gradwatch."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith((_HERE, _TORCH)):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return None


class _OpWatch(TorchFunctionMode):
    """Finds the first torch call whose result is non-finite; hooks the autograd nodes."""

    def __init__(self, stack: list[str], backward: bool) -> None:
        super().__init__()
        self.stack = stack
        self.backward = backward
        self.found: dict[str, Any] | None = None
        self.grad_origin: dict[str, Any] | None = None
        self._hooked: set[int] = set()
        self._handles: list[Any] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        results = [t for _, t in tensors(out) if t.is_floating_point()]
        if not results:
            return out
        module = self.stack[-1] if self.stack else ""
        if self.found is None:
            hit = next((t for t in results if bad(t)), None)
            if hit is not None:
                self.found = opcause.describe_op(func, args, kwargs, hit, module)
                self.found["source"] = _user_frame()
        if self.backward:
            for t in results:
                self._hook(t, func, module)
        return out

    def _hook(self, t: torch.Tensor, func: Any, module: str) -> None:
        node = t.grad_fn
        if node is None or id(node) in self._hooked:
            return
        self._hooked.add(id(node))

        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if self.grad_origin is not None:
                return
            incoming = [g for g in grad_outputs if isinstance(g, torch.Tensor)]
            outgoing = [g for g in grad_inputs if isinstance(g, torch.Tensor)]
            if any(bad(g) for g in outgoing) and not any(bad(g) for g in incoming):
                self.grad_origin = opcause.describe_node(node, func, module)

        self._handles.append(node.register_hook(hook))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


class _Modules:
    """Forward hooks on every submodule: the module stack and the first non-finite output."""

    def __init__(self, model: nn.Module, prefix: str) -> None:
        self.stack: list[str] = [prefix.rstrip(".")]
        self.first_output: str | None = None
        self.handles: list[Any] = []
        for name, sub in model.named_modules():
            if sub is model:
                continue
            qualified = prefix + name
            self.handles.append(sub.register_forward_pre_hook(self._enter(qualified)))
            self.handles.append(sub.register_forward_hook(self._leave(qualified)))

    def _enter(self, name: str) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            self.stack.append(name)

        return hook

    def _leave(self, name: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if self.stack and self.stack[-1] == name:
                self.stack.pop()
            if self.first_output is None and any(bad(t) for _, t in tensors(output)):
                self.first_output = name

        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _restore_rng(c: Captured) -> tuple[torch.Tensor, tuple[int, torch.Tensor] | None]:
    """Put the generators where they were before the captured forward; return the current
    states."""
    now = torch.get_rng_state()
    now_cuda = None
    if c.cuda_rng is not None:
        index = c.cuda_rng[0]
        now_cuda = (index, torch.cuda.get_rng_state(index))
        torch.cuda.set_rng_state(c.cuda_rng[1], index)
    if c.rng is not None:
        torch.set_rng_state(c.rng)
    return now, now_cuda


def replay(model: nn.Module, prefix: str, c: Captured) -> dict[str, Any] | None:
    """Re-run one captured forward of ``model`` (names prefixed by ``prefix``) and then a
    backward with a gradient of ones at its outputs; the origin found, or ``None``."""
    model = getattr(model, "_orig_mod", model)  # torch.compile: replay the eager module
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    rng, cuda_rng = _restore_rng(c)
    modules = _Modules(model, prefix)
    watch = _OpWatch(modules.stack, backward=True)
    try:
        with torch.enable_grad(), watch:
            out = model.forward(*c.args, **c.kwargs)
        if watch.found is not None:
            return {**watch.found, "phase": "forward", "first_module_output": modules.first_output}
        outs = [t for _, t in tensors(out) if t.is_floating_point() and t.requires_grad]
        return _backward(model, outs, watch) if outs else None
    finally:
        watch.remove()
        modules.remove()
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng[1], cuda_rng[0])


def _backward(model: nn.Module, outs: list[torch.Tensor], watch: _OpWatch) -> dict[str, Any] | None:
    """The backward half: anomaly mode names a node that returns NaN inside a composite
    call the node hooks cannot see."""
    params = [p for p in model.parameters() if p.requires_grad]
    anomaly: str | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                torch.autograd.grad(
                    outs, params, [torch.ones_like(t) for t in outs], allow_unused=True
                )
        except RuntimeError as exc:
            anomaly = str(exc)
    if watch.grad_origin is not None:
        return {**watch.grad_origin, "phase": "backward"}
    if anomaly is not None and "returned nan" in anomaly:
        node = anomaly.split("'")[1] if anomaly.count("'") >= 2 else None
        return {
            "phase": "backward",
            "module": None,
            "op": None,
            "autograd_node": node,
            "cause": "this backward function returned NaN (found by anomaly mode)",
        }
    return None
