"""Which modules of a watched model run outermost in a training forward, for a model whose
own ``forward()`` does not run: a LightningModule whose ``training_step`` calls
``self.net(x)``, a wrapper whose user calls ``model.backbone(x)`` and ``model.head(h)``.

The per-batch capture (batch checksum, NaN-origin inputs, the input check) rides on the
root module's forward hooks (:class:`gradwatch.hooks.model.ModelHooks`). When the first
backward pass that reaches a model's trained parameters comes without a training forward
of its root, a :class:`Probe` watches the model's next training forward: a pre-hook and a
post-hook on each submodule that holds a trained parameter (itself or below it) count the
nesting, and the modules entered at depth 0 with gradients enabled are the outermost ones
that ran (a forward recomputed inside a backward pass by activation checkpointing is not
one); their capture hooks run from then on, so the probed step is captured too.
Modules without a trained parameter below them (a loss module, a metric) are left out:
what they are given is not the input of the trained computation. At the next backward pass
the probe's hooks come off and the capture hooks stay on the modules found. A model whose
root runs never gets a probe: it keeps its two root hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from gradwatch.session import portable

Hook = Callable[..., Any]


def in_backward() -> bool:
    """Whether the calling thread runs a backward pass: a forward there is activation
    checkpointing's recomputation (``torch.utils.checkpoint``), not a training forward."""
    return bool(torch._C._current_graph_task_id() != -1)


class Probe:
    """Hooks on the submodules of one model that note the outermost ones that ran, and
    run their capture hooks already (``capture(name)`` makes the pre- and post-hook of
    submodule ``name``), so the probed step is captured too."""

    def __init__(
        self, model: nn.Module, trained: Set[int], capture: Callable[[str], tuple[Hook, Hook]]
    ) -> None:
        self.model = model
        #: name -> (module, its capture pre-hook, post-hook), in the order they first ran
        self.found: dict[str, tuple[nn.Module, Hook, Hook]] = {}
        self._capture = capture
        self._depth = 0
        self._outer: Hook | None = None  # the capture post-hook of the running outer call
        self._handles: list[RemovableHandle] = []
        for name, module in model.named_modules(remove_duplicate=True):
            if module is model or not any(id(p) in trained for p in module.parameters()):
                continue
            self._handles.append(portable.forward_pre_hook(module, self._enter(name)))
            self._handles.append(portable.forward_hook(module, self._leave, always_call=True))

    @property
    def saw(self) -> bool:
        """Whether a training forward of a submodule ran since the probe started."""
        return bool(self.found)

    def _enter(self, name: str) -> Hook:
        found = self.found
        is_grad_enabled = torch.is_grad_enabled

        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            depth, self._depth = self._depth, self._depth + 1
            if depth or not is_grad_enabled() or in_backward():
                return
            entry = found.get(name)
            if entry is None:
                entry = found[name] = (module, *self._capture(name))
            self._outer = entry[2]
            entry[1](module, args, kwargs)

        return hook

    def _leave(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self._outer is not None:
            post, self._outer = self._outer, None
            post(module, args, output)

    def remove(self) -> None:
        """Take every hook off."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
