"""Which modules ran in a training forward — the evidence ``param-no-grad`` needs before it
calls a parameter cut off from the loss (its module ran, yet no gradient came back) rather
than unused (its module did not run: an idle expert, a task head used in turn).

A gradient tensor is evidence enough by itself (the backward pass reached the parameter,
so it was used), so only parameters that never had one are followed: at attach, a forward
pre-hook goes on each module that directly holds a trainable parameter of a watched
optimizer, and notes the steps it ran on; after each backward pass the hooks of modules
whose every followed parameter now has a gradient come off (on the training thread, which
owns the hooks). After the first step only the modules of parameters that never had a
gradient keep one, so the common step pays nothing. A model compiled in place is not
followed (hooks that come off would make it recompile): its never-used parameters are
then reported as unused only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from gradwatch.session import portable

KEPT_STEPS = 256  # steps remembered per followed module (the checks lag a window behind)


class _Watch(Protocol):
    params: list[torch.Tensor]
    step: int  # steps taken


class _Followed:
    """One followed module: the steps it ran on, per optimizer, and what it waits for."""

    __slots__ = ("handle", "keys", "steps")

    def __init__(self, keys: set[tuple[int, int]]) -> None:
        self.keys = keys  # (optimizer, tensor) pairs that never had a gradient yet
        self.steps: dict[int, deque[int]] = {o: deque(maxlen=KEPT_STEPS) for o, _ in keys}
        self.handle: RemovableHandle | None = None


class ModuleRuns:
    """The steps on which the modules of never-trained parameters ran (see the module)."""

    def __init__(self, models: Mapping[str, nn.Module], watches: Sequence[_Watch]) -> None:
        self._watches = watches
        self._of: dict[tuple[int, int], _Followed] = {}
        #: per optimizer: the modules still followed for its tensors
        self._live: dict[int, list[_Followed]] = {}
        # a tensor two optimizers hold (InfoGAN's information optimizer over the
        # discriminator's) is followed for each of them
        where: dict[int, list[tuple[int, int]]] = {}
        for o, w in enumerate(watches):
            for i, p in enumerate(w.params):
                where.setdefault(id(p), []).append((o, i))
        self._modules: list[tuple[nn.Module, _Followed]] = []
        for model in models.values():
            compiled = getattr(model, "_compiled_call_impl", None) is not None
            if compiled or hasattr(model, "_orig_mod"):  # model.compile(), torch.compile(m)
                continue
            for module in model.modules():
                keys = {
                    key
                    for p in module._parameters.values()
                    if p is not None and p.requires_grad and id(p) in where
                    for key in where[id(p)]
                }
                keys -= self._of.keys()  # a module shared by two models: followed once
                if keys:
                    followed = _Followed(keys)
                    self._modules.append((module, followed))
                    for key in keys:
                        self._of[key] = followed

    def attach(self) -> None:
        """Put a forward pre-hook on every followed module."""
        for module, followed in self._modules:
            followed.handle = portable.forward_pre_hook(module, self._hook(followed))
            for o in followed.steps:
                self._live.setdefault(o, []).append(followed)
        self._modules = []

    def _hook(self, followed: _Followed) -> Any:
        steps, watches = followed.steps, self._watches

        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if not module.training:  # an evaluation pass: not a training forward
                return
            for o, ran in steps.items():
                step = watches[o].step + 1  # the step this forward's gradients are for
                if not ran or ran[-1] != step:
                    ran.append(step)

        return hook

    def after_backward(self, optimizer: int) -> None:
        """A backward pass reached ``optimizer``'s tensors: stop following every module
        whose followed tensors all have a gradient (or were frozen) now."""
        live = self._live.get(optimizer)
        if not live:
            return
        params = self._watches[optimizer].params
        for followed in live:
            followed.keys = {
                (o, i)
                for o, i in followed.keys
                if o != optimizer or (params[i].grad is None and params[i].requires_grad)
            }
            if not followed.keys and followed.handle is not None:
                followed.handle.remove()
                followed.handle = None
        self._live[optimizer] = [f for f in live if f.handle is not None]

    def ran(self, optimizer: int, index: int, step: int) -> bool | None:
        """Whether the module of tensor ``index`` ran in a training forward of ``step``;
        ``None`` when there is no such evidence (not a module's parameter, or a compiled
        model's). Asked only of tensors that never had a gradient: once one has, its
        module's hook may be off, and it says ``False`` for the steps since."""
        followed = self._of.get((optimizer, index))
        # kept after the hook came off: the checks look at a step a window later
        return None if followed is None else step in followed.steps[optimizer]

    def detach(self) -> None:
        """Remove every hook."""
        for followed in self._of.values():
            if followed.handle is not None:
                followed.handle.remove()
                followed.handle = None
        self._live.clear()
