"""What the loss's autograd graph says about the model's connectivity, looked at after a
backward pass — once per graph *shape*, not per step.

The shape of a pass is what the backward tap already knows for free: the type of the
loss's node and how many tensors of each watched optimizer the pass reached. A pass of a
shape seen before is not walked again, so the common step adds one tuple and one set
lookup. A new shape is walked once (:func:`gradwatch.hooks.forward_order.walk`), which gives

* the forward order of each optimizer's tensors (:mod:`gradwatch.hooks.forward_order`);
* when the pass reached no watched tensor, where the loss was cut from the model (handed
  to the lifecycle checks as a ``backward-cut`` event: ``param-no-grad``, never
  ``step-without-backward``, when ``step()`` follows);
* trainable ``nn.Parameter`` leaves the loss reaches that no watched model and no live
  optimizer holds (layers kept in a plain list or dict, parameters made in ``forward``):
  ``param-not-in-optimizer``, with the shape and the plain container that holds them.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gradwatch.checks.findings import finding
from gradwatch.checks.fmt import counted
from gradwatch.checks.lifecycle import LEAF_CUT
from gradwatch.checks.twins import same_model
from gradwatch.core import checkids
from gradwatch.hooks.forward_order import Graph, forward_order, walk

if TYPE_CHECKING:
    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch

MAX_SHAPES = 64  # graph shapes remembered; past that, new shapes are no longer walked
Shape = tuple[str, tuple[int, ...]]
NO_HOLDER = "no module holds them: made in forward()?"
_REGISTERED = frozenset({"_modules", "_parameters", "_buffers"})  # nn.Module's own dicts
_COPY = "a second copy of the model"


def _spelled(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


def cut_description(root: torch.Tensor | None, graph: Graph | None) -> str:
    """Where the loss was cut from the model, in words (one clause)."""
    if root is None:
        return "backward() was called on several tensors, none connected to the model"
    if root.grad_fn is None:
        return LEAF_CUT
    leaves = [] if graph is None else graph.leaves
    if not leaves:
        return "the loss's graph reaches no tensor that requires a gradient"
    shown = ", ".join(_spelled(t) for t in leaves[:3])
    return (
        f"the loss's graph ends at {counted(len(leaves), 'tensor')} that "
        f"{'is' if len(leaves) == 1 else 'are'} not the model's parameters ({shown}): "
        "made by torch.tensor(...)/requires_grad=True from values cut "
        "off by .detach(), .item() or numpy"
    )


class GraphWatch:
    """The graph-shape cache and the findings it leads to, for one run."""

    def __init__(self, run: HookContext[OptimizerWatch]) -> None:
        self.run = run
        self._shapes: dict[Shape, str] = {}  # shape -> cut description ("" when connected)
        self._order_reach: dict[int, int] = {}  # watch index -> tensors its order covers
        self._reported: set[int] = set()  # ids of the unowned leaves already reported

    def after_backward(self, tensor: torch.Tensor | None, reached: list[int]) -> str:
        """Look at one backward pass (``reached``: tensors reached per watch); returns
        where the loss was cut from the model, or ``""`` when it reached a watched tensor."""
        node = None if tensor is None else tensor.grad_fn
        shape: Shape = (type(node).__name__, tuple(reached))
        known = self._shapes.get(shape)
        if known is not None:
            return known
        if len(self._shapes) >= MAX_SHAPES:
            return "" if any(reached) else cut_description(tensor, None)
        graph = walk(node) if node is not None else None
        cut = "" if any(reached) else cut_description(tensor, graph)
        if cut and graph is not None and graph.leaves:
            copy = self._second_copy(graph.leaves)
            if copy:
                cut = f"the loss's graph ends at {copy}"
        self._shapes[shape] = cut
        if graph is not None:
            self._learn_order(graph, reached)
            self._unowned(graph, trains=any(reached))
        return cut

    def _learn_order(self, graph: Graph, reached: list[int]) -> None:
        """Keep, per optimizer, the order of the graph that reached most of its tensors."""
        for w, count in zip(self.run.watches, reached, strict=True):
            if count > self._order_reach.get(w.index, 0):
                order = forward_order(graph, w.params)
                if order is not None:
                    w.forward_order = order
                    self._order_reach[w.index] = count

    def _unowned(self, graph: Graph, trains: bool = False) -> None:
        """``param-not-in-optimizer`` for trainable parameters the loss reaches that no
        watched model and no optimizer holds. A complete second copy of a watched module
        (same class, same parameter shapes) that feeds a loss which also trains a watched
        optimizer's tensors (``trains``) is a target network or an EMA copy kept in step by
        hand: said at info level, as what it is."""
        names = self.run.names
        loose = [
            t
            for t in graph.leaves
            if isinstance(t, nn.Parameter)
            and t.requires_grad
            and id(t) not in names
            and id(t) not in self._reported
        ]
        if not loose or not self.run.sink.enabled(checkids.PARAM_NOT_IN_OPTIMIZER):
            return
        # a watched model's own tensors (a layer replaced after watch()) are the periodic
        # coverage check's, named as the model names them; any optimizer's may train them
        models = self.run.model_hooks.models.values()
        held = _held_by_optimizers() | {id(p) for m in models for p in m.parameters()}
        groups: dict[str, list[torch.Tensor]] = {}
        for t in loose:
            if id(t) not in held:
                groups.setdefault(self._holder(t), []).append(t)
        step = self.run.step + 1
        for where, tensors in groups.items():
            self._reported.update(id(t) for t in tensors)
            # a copy kept in a watched model's plain list is a layer cut off, never a twin
            plain = " in the plain " in where
            twin = _twin_of(tensors, models) if trains and not plain else None
            if twin is not None:
                self.run.sink.report(_twin_finding(step, tensors, *twin))
                continue
            shapes = ", ".join(_spelled(t) for t in tensors[:4])
            more = f" and {len(tensors) - 4} more" if len(tensors) > 4 else ""
            self.run.sink.report(
                finding(
                    checkids.PARAM_NOT_IN_OPTIMIZER,
                    step,
                    f"{counted(len(tensors), 'trainable tensor')} ({shapes}{more}) "
                    f"{'reaches' if len(tensors) == 1 else 'reach'} the loss but no watched "
                    f"module and no optimizer holds {'it' if len(tensors) == 1 else 'them'} "
                    f"({where}), so "
                    f"{'it never trains' if len(tensors) == 1 else 'they never train'}.",
                    "build the optimizer over the parameters of the model that runs in "
                    "forward() and update the copy from it after each step."
                    if _COPY in where
                    else "register submodules with nn.ModuleList/nn.ModuleDict (not a plain list "
                    "or dict), create parameters in __init__ rather than forward, and build the "
                    "optimizer after the model is complete.",
                    param=f"unregistered: {where.split(', the model')[0]}",
                    details={
                        "shapes": [list(t.shape) for t in tensors],
                        "dtypes": [str(t.dtype).removeprefix("torch.") for t in tensors],
                        "held_by": where,
                    },
                )
            )
        self.run.sink.flush()

    def _holder(self, tensor: torch.Tensor) -> str:
        """Which plain container of a watched model holds ``tensor`` (or its module)."""
        for key, model in self.run.model_hooks.models.items():
            prefix = f"{key}." if key else ""
            for path, module in model.named_modules():
                for attr, value in vars(module).items():
                    if attr in _REGISTERED:
                        continue
                    found = _in_container(value, tensor)
                    if found is not None:
                        at = f"{prefix}{path}.{attr}" if path else f"{prefix}{attr}"
                        return f"{found} in the plain {type(value).__name__} `{at}`"
        return self._second_copy([tensor]) or NO_HOLDER

    def _second_copy(self, tensors: list[torch.Tensor]) -> str:
        """When ``tensors`` are the parameters of a live module that is not watched — the
        model trained in forward() while the optimizer holds another copy of it (an EMA or
        a deepcopy) — that, in words; else ``""``. Scans the heap: only for a finding."""
        from gradwatch.session.autowatch import root_names

        wanted = {id(t) for t in tensors}
        modules = _live_modules()
        children = {id(c) for m in modules for c in m.children()}
        watched = self.run.model_hooks.models
        ids = {id(m) for m in watched.values()}
        owners = [
            m
            for m in modules
            if id(m) not in children
            and id(m) not in ids
            and any(id(p) in wanted for p in m.parameters())
        ]
        if not owners:
            return ""
        owner = owners[0]
        name = root_names([owner])[0]
        for key, model in watched.items():
            if same_model(model, owner):
                mine = {id(p) for p in model.parameters()}
                held = sum(1 for w in self.run.watches for p in w.params if id(p) in mine)
                copy = f"`{key or root_names([model])[0]}`"
                return (
                    f"the parameters of `{name}` ({type(owner).__name__}), the model trained in "
                    f"forward(), which no optimizer holds; the optimizer's {held} tensors belong "
                    f"to {_COPY} ({copy}, not the one trained in forward()): "
                    "an optimizer built over an EMA copy or a deepcopy?"
                )
        return f"the parameters of `{name}` ({type(owner).__name__}), a module that is not watched"


def _owner(tensors: list[torch.Tensor]) -> nn.Module | None:
    """The smallest live module whose parameters are exactly ``tensors`` (a scan of the
    heap, done only when loose parameters were found)."""
    ids = {id(t) for t in tensors}
    best: nn.Module | None = None
    for obj in _live_modules():
        own = {id(p) for p in obj.parameters()}
        if own == ids and (best is None or len(list(best.modules())) > len(list(obj.modules()))):
            best = obj
    return best


def _live_modules() -> list[nn.Module]:
    """Every live module (a scan of the heap: only when a finding is being written);
    ``type()``, since ``isinstance`` may run a ``__class__`` property of any object."""
    return [o for o in gc.get_objects() if issubclass(type(o), nn.Module)]


def _twin_of(tensors: list[torch.Tensor], models: Any) -> tuple[nn.Module, nn.Module] | None:
    """(the module holding ``tensors``, the watched model or top-level child it is a copy
    of, :func:`gradwatch.checks.twins.same_model`); None when the tensors are not such a
    copy. Outside every watched model, a copy is no layer left out of one, so no further
    evidence is asked (the coverage check asks, inside a model, that the loss not reach
    it)."""
    owner = _owner(tensors)
    if owner is None:
        return None
    for model in models:
        for module in (model, *model.children()):
            if module is not owner and same_model(module, owner):
                return owner, module
    return None


def _twin_finding(
    step: int, tensors: list[torch.Tensor], owner: nn.Module, original: nn.Module
) -> Any:
    name = type(owner).__name__
    return finding(
        checkids.PARAM_NOT_IN_OPTIMIZER,
        step,
        f"{counted(len(tensors), 'tensor')} of a second {name} (a copy of the trained "
        f"one, in no optimizer) reach the loss: a target network or an EMA copy, updated "
        "by hand; it gets gradients it never uses.",
        "if the loss should not reach the copy, compute its part under torch.no_grad() or "
        "detach its output; nothing trains it either way.",
        severity="info",
        param=f"copy of {name}",
        details={"held_by": f"a second {name}", "copy_of": type(original).__name__},
    )


def _in_container(value: Any, tensor: torch.Tensor) -> str | None:
    """The class of the module inside a plain list/tuple/dict ``value`` that owns
    ``tensor`` (``Parameter`` when the container holds the tensor itself)."""
    if not isinstance(value, list | tuple | dict):
        return None
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if item is tensor:
            return "Parameter"
        if isinstance(item, nn.Module) and any(p is tensor for p in item.parameters()):
            return type(item).__name__
    return None


def _held_by_optimizers() -> set[int]:
    """Ids of every tensor held by a live optimizer (a scan of the heap, done only when a
    loose parameter was found)."""
    held: set[int] = set()
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.optim.Optimizer):
            for group in obj.param_groups:
                held.update(id(p) for p in group["params"])
    return held
