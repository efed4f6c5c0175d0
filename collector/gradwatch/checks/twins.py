"""Trainable tensors in no optimizer that are so by design, and the evidence that says so,
for ``param-not-in-optimizer`` (:meth:`gradwatch.checks.engine.CheckEngine.check_coverage`
and :mod:`gradwatch.hooks.connectivity`).

* A **copy of a trained module**: a module whose trainable tensors no optimizer holds,
  of the same class and the same parameter shapes, in order, as a module whose tensors an
  optimizer does hold — a target network or an EMA copy, kept in step by hand
  (:func:`same_model` is the one test of "two copies of one model" that both the coverage
  check and the connectivity check apply). A layer left out of the optimizer can have the
  shapes of one that is in it (a stack of identical blocks), so inside a watched model
  the copy also needs the loss not to reach it: no gradient after the first backward.
* A **frozen base under adapters**: every tensor the optimizers hold of a model is a
  parameter of a registered parametrization (``torch.nn.utils.parametrize``: LoRA
  adapters as minLoRA registers them), and every such parameter is held. The rest of the
  model is the base the adapters fine-tune, frozen by design even when its tensors keep
  ``requires_grad=True``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from torch import nn
from torch.nn.utils import parametrize


def same_model(a: nn.Module, b: nn.Module) -> bool:
    """Whether ``a`` and ``b`` are two copies of one model: the same class and the same
    parameter shapes, in order."""
    shapes = [tuple(p.shape) for p in a.parameters()]
    return type(a) is type(b) and shapes == [tuple(p.shape) for p in b.parameters()]


@dataclass(frozen=True)
class Copy:
    """A module of a watched model that no optimizer holds, a copy of one that is held."""

    path: str  # its qualified name (the model's key first)
    module: nn.Module
    #: the qualified name of the module it copies; None: not a copy, but made of layers
    #: the trained modules also have (a deeper teacher of the same blocks), run frozen
    original: str | None

    def reached(self) -> bool:
        """Whether a backward pass has left a gradient on any of its tensors."""
        return any(p.grad is not None for p in self.module.parameters())


def _named(models: Mapping[str, nn.Module]) -> Iterator[tuple[str, nn.Module]]:
    for key, model in models.items():
        for path, module in model.named_modules():
            yield ".".join(part for part in (key, path) if part), module


def copies(models: Mapping[str, nn.Module], held: set[int]) -> list[Copy]:
    """The outermost modules of ``models`` with trainable tensors, none of them in an
    optimizer (ids in ``held``), that are a copy (:func:`same_model`) of a module whose
    trainable tensors are all held."""
    trained: dict[type, list[tuple[str, nn.Module]]] = {}
    loose: list[tuple[str, nn.Module]] = []
    for path, module in _named(models):
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            continue
        inside = [id(p) in held for p in params]
        if all(inside):
            trained.setdefault(type(module), []).append((path, module))
        elif not any(inside):
            loose.append((path, module))
    outer: list[tuple[str, nn.Module]] = []  # loose modules inside no other loose one
    for path, module in loose:
        if not any(path.startswith(f"{o}.") for o, _ in outer):
            outer.append((path, module))
    found: list[Copy] = []
    for path, module in outer:
        original = _original(module, trained, set())
        if original is not None:
            found.append(Copy(path, module, original[0]))
            continue
        inner = _made_of_copies(path, module, loose, trained)
        if inner is None:
            continue  # nothing inside it copies a trained module: it is not by design
        # a wrapper of copies (an EMA holder around a copy of the network) names them; a
        # module whose layers only resemble trained ones (a deeper teacher built of the same
        # blocks: several of its layers would copy one) is no copy, but one module
        found += inner or [Copy(path, module, None)]
    return found


def _original(
    module: nn.Module, trained: dict[type, list[tuple[str, nn.Module]]], used: set[int]
) -> tuple[str, nn.Module] | None:
    """The first trained module, not in ``used`` (ids: one module may sit in two watched
    models under two names), of which ``module`` is a copy."""
    return next(
        (
            (p, m)
            for p, m in trained.get(type(module), [])
            if id(m) not in used and same_model(m, module)
        ),
        None,
    )


def _made_of_copies(
    path: str,
    module: nn.Module,
    loose: list[tuple[str, nn.Module]],
    trained: dict[type, list[tuple[str, nn.Module]]],
) -> list[Copy] | None:
    """Inside loose module ``path`` (itself no copy): the outermost copies of trained
    modules, each of a different one, when together they hold every trainable tensor of
    it (``[]`` when some copy exists but not so: its layers only resemble trained ones);
    None when nothing inside it is a copy."""
    used: set[int] = set()
    inner: list[Copy] = []
    resembles = False
    for sub, m in loose:
        if not sub.startswith(f"{path}.") or any(sub.startswith(f"{c.path}.") for c in inner):
            continue
        if _original(m, trained, set()) is None:
            continue
        resembles = True
        original = _original(m, trained, used)
        if original is None:
            return []  # a second copy of one trained module: a resemblance
        used.add(id(original[1]))
        inner.append(Copy(sub, m, original[0]))
    if not resembles:
        return None
    covered = {id(p) for c in inner for p in c.module.parameters()}
    if any(p.requires_grad and id(p) not in covered for p in module.parameters()):
        return []
    return inner


def adapters_only(model: nn.Module, held: set[int]) -> int:
    """The number of parametrization tensors of ``model`` when the optimizers hold (ids in
    ``held``) exactly those of its tensors: the parameters of its registered
    parametrizations, not their ``original``; else 0."""
    adapters: set[int] = set()
    for module in model.modules():
        if not parametrize.is_parametrized(module):
            continue
        lists = module.parametrizations
        assert isinstance(lists, nn.ModuleDict)
        for plist in lists.values():
            for name, p in plist.named_parameters():
                if not name.startswith("original"):
                    adapters.add(id(p))
    if not adapters:
        return 0
    mine = {id(p) for p in model.parameters()} | adapters
    return len(adapters) if held & mine == adapters else 0
