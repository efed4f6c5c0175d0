"""Attaches gradwatch to an unmodified script: the in-process half of ``gradwatch run``.

How it gets into the script's process: ``gradwatch run`` writes a ``sitecustomize.py``
(:data:`SITECUSTOMIZE`) into a temporary folder and puts that folder first on the
child's ``PYTHONPATH``. At interpreter start-up it only adds an import hook (no torch, so
Python processes that never touch torch stay as fast as before), then runs the
``sitecustomize`` it shadows, if any. When the process imports ``torch``, the hook calls
:func:`install`, which

1. wraps ``torch.optim.Optimizer.__init__`` (the class attribute, in this process only) so
   that every optimizer built is remembered;
2. once an optimizer is pending, adds a global forward pre-hook: at the next forward of
   any module (the first training forward, before any backward), every optimizer built so
   far is attached in **one run** with the root modules that own its parameters, found
   by a scan of live ``nn.Module`` objects — parameter names come from those modules, as
   with ``gradwatch.watch(model, optimizer)``. Optimizers built after that get a run of
   their own at the next forward;
3. if the process's first backward pass comes before any optimizer was built, the loop
   updates its parameters by hand: the root modules owning the parameters that pass
   reached are watched without an optimizer (:mod:`gradwatch.hooks.manual_updates`).

Options come from the environment (``GRADWATCH_PROJECT``, ``GRADWATCH_NAME``,
``GRADWATCH_CHECKS``, ``GRADWATCH_DIR``, ``GRADWATCH_SERVER``), which is how
``gradwatch run`` passes its flags; each run started is appended as one JSON line to
``$GRADWATCH_RUN_MANIFEST`` so that ``gradwatch run`` can report it after the script
exits, and the script's lint findings (``$GRADWATCH_LINT_FINDINGS``, a JSON file written
by ``gradwatch run``) are stored with every run started. Runs are closed by the
collector's own exit handler.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from gradwatch.checks.findings import finding
from gradwatch.checks.fmt import counted
from gradwatch.core import checkids
from gradwatch.core.errors import ConfigError
from gradwatch.hooks import backward as backward_tap
from gradwatch.hooks import classloss, clipgrad, loaders
from gradwatch.hooks.forward_order import walk
from gradwatch.hooks.manual_updates import ManualUpdates
from gradwatch.session.attach import watch
from gradwatch.session.handle import Run
from gradwatch.transport import record_builder as records

ENV_ON = "GRADWATCH_AUTOWATCH"
ENV_MANIFEST = "GRADWATCH_RUN_MANIFEST"
ENV_LINT = "GRADWATCH_LINT_FINDINGS"
_LIBRARIES = ("torch.", "gradwatch.")  # frames whose variable names say nothing about roots

SITECUSTOMIZE = '''\
"""Written by `gradwatch run`: attach gradwatch once this process imports torch, then run
the sitecustomize this file shadows, if there is one."""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


def _gradwatch_attach():
    try:
        from gradwatch.session import autowatch
    except Exception as exc:
        sys.stderr.write(
            f"gradwatch run: cannot import gradwatch in {sys.executable} ({exc}); "
            "this process is not watched (install gradwatch in that environment)\\n"
        )
        return
    autowatch.install()


class _GradwatchTorchHook(importlib.abc.MetaPathFinder):
    done = False

    def find_spec(self, name, path, target=None):
        if name != "torch" or self.done:
            return None
        self.done = True
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_attach(module):
            exec_module(module)
            _gradwatch_attach()

        spec.loader.exec_module = exec_then_attach
        return spec


if os.environ.get("GRADWATCH_AUTOWATCH") == "1":
    if "torch" in sys.modules:
        _gradwatch_attach()
    else:
        sys.meta_path.insert(0, _GradwatchTorchHook())

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["sitecustomize"] = _module
    _spec.loader.exec_module(_module)
'''


class _State:
    """What :func:`install` set up in this process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.original_init: Callable[..., None] | None = None
        self.pending: list[weakref.ref[torch.optim.Optimizer]] = []
        self.forward_hook: RemovableHandle | None = None
        self.backward_listening = False
        self.early_taps = False  # gradwatch.hooks loaders, clipgrad, classloss held from start
        self.runs: list[Run] = []
        #: optimizers that hold parameters of no live module (the model built again after
        #: them?): kept for the by-hand run, which says so if its model is in none
        self.orphans: list[weakref.ref[torch.optim.Optimizer]] = []


_state = _State()


def install() -> None:
    """Remember every optimizer this process builds and attach at the next forward."""
    if _state.original_init is not None:
        return
    original = torch.optim.Optimizer.__init__
    _state.original_init = original
    _state.pid = os.getpid()

    @functools.wraps(original)
    def init(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            _note(self)
        except Exception as exc:  # gradwatch must never break the script
            _say(f"internal error while noting an optimizer ({type(exc).__name__}: {exc})")

    torch.optim.Optimizer.__init__ = init  # type: ignore[method-assign]
    backward_tap.install(_on_backward)
    _state.backward_listening = True
    # from process start: a batch drawn before the loop, a clipping function imported by name
    loaders.install()
    clipgrad.install()
    classloss.install()
    _state.early_taps = True


def uninstall() -> None:
    """Undo :func:`install` (the runs already started stay attached until they close)."""
    if _state.original_init is not None:
        torch.optim.Optimizer.__init__ = _state.original_init  # type: ignore[method-assign]
        _state.original_init = None
    if _state.forward_hook is not None:
        _state.forward_hook.remove()
        _state.forward_hook = None
    _state.pending.clear()
    _stop_listening()
    if _state.early_taps:
        _state.early_taps = False
        loaders.uninstall()
        clipgrad.uninstall()
        classloss.uninstall()


def _stop_listening() -> None:
    if _state.backward_listening:
        _state.backward_listening = False
        backward_tap.uninstall(_on_backward)


def _on_backward(root: torch.Tensor | None, took: float, tensor: torch.Tensor | None) -> None:
    """The process's first backward pass: with no optimizer built so far, the loop updates
    its parameters by hand; watch the models that pass reached."""
    if os.getpid() != _state.pid:
        return
    _stop_listening()  # the first pass decides
    if _state.runs or _state.pending or tensor is None or tensor.grad_fn is None:
        return
    try:
        _attach_by_hand(root, took, tensor)
    except Exception as exc:  # gradwatch must never break the script
        _say(f"internal error while attaching ({type(exc).__name__}: {exc}); not watched")


def _attach_by_hand(root: torch.Tensor | None, took: float, tensor: torch.Tensor) -> None:
    leaves = walk(tensor.grad_fn).leaves
    roots = _roots_owning({id(t) for t in leaves if isinstance(t, torch.nn.Parameter)})
    if not roots:
        return
    models: torch.nn.Module | dict[str, torch.nn.Module] = (
        roots[0] if len(roots) == 1 else dict(zip(root_names(roots), roots, strict=True))
    )
    try:
        run = watch(models)
    except ConfigError as exc:
        _say(f"not watched: {exc}")
        return
    _state.runs.append(run)
    _attach_lint(run)
    for w in run._watches:
        w.forget_grads()  # this pass's gradients are new to the run
    run._backward_listener(root, took, tensor)  # the tap called its listeners before this run's
    _announce(run, roots, [])
    _orphaned(run, roots)


def _orphaned(run: Run, roots: list[torch.nn.Module]) -> None:
    """``param-not-in-optimizer`` when an optimizer of the script holds tensors of no live
    module while the models the loss reaches are in no optimizer: the model was built
    again after the optimizer was made, so the optimizer steps tensors nothing uses and the
    model the loop trains never changes."""
    orphans = [o for o in (ref() for ref in _state.orphans) if o is not None]
    if not orphans or not run._sink.enabled(checkids.PARAM_NOT_IN_OPTIMIZER):
        return
    trained = [p for r in roots for p in r.parameters() if p.requires_grad]
    held = [p for o in orphans for p in _params(o)]
    same = sorted(tuple(p.shape) for p in trained) == sorted(tuple(p.shape) for p in held)
    names = ", ".join(type(r).__name__ for r in roots)
    kinds = ", ".join(sorted({type(o).__name__ for o in orphans}))
    run._sink.report(
        finding(
            checkids.PARAM_NOT_IN_OPTIMIZER,
            run.step + 1,
            f"{counted(len(trained), 'tensor')} of {names}, which the loss reaches, are in no "
            f"optimizer, while {kinds} holds {counted(len(held), 'tensor')} of no live module"
            + (" with the same shapes" if same else "")
            + ": the model was built again after the optimizer was made, so it never trains.",
            "build the optimizer from the model the loop trains, after its last re-creation.",
            param=f"model {names}",
            details={"orphan_tensors": len(held), "model_tensors": len(trained), "same": same},
        )
    )
    run._sink.flush()


def _say(message: str) -> None:
    sys.stderr.write(f"gradwatch: {message}\n")


def _note(optimizer: torch.optim.Optimizer) -> None:
    if os.getpid() != _state.pid:  # a forked worker: the parent process watches
        return
    if isinstance(optimizer, ManualUpdates):  # gradwatch's own stand-in, already watched
        return
    _state.pending.append(weakref.ref(optimizer))
    if _state.forward_hook is None:
        _state.forward_hook = torch.nn.modules.module.register_module_forward_pre_hook(_on_forward)


def _on_forward(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
    if os.getpid() != _state.pid:
        return
    optimizers = [o for o in (ref() for ref in _state.pending) if o is not None]
    _state.pending.clear()
    if _state.forward_hook is not None:  # the hooks of this call are already a snapshot
        _state.forward_hook.remove()
        _state.forward_hook = None
    if optimizers:
        try:
            _attach(optimizers, module, args)
        except Exception as exc:  # gradwatch must never break the script
            _say(f"internal error while attaching ({type(exc).__name__}: {exc}); not watched")


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def owning_roots(optimizers: Sequence[torch.optim.Optimizer]) -> list[torch.nn.Module]:
    """The live root modules (not a child of another module) that own any parameter of
    ``optimizers``, in the order they were created."""
    return _roots_owning({id(p) for o in optimizers for p in _params(o)})


def _roots_owning(wanted: set[int]) -> list[torch.nn.Module]:
    """The live root modules that own any tensor whose id is in ``wanted``."""
    # type(), not isinstance(): some lazy objects warn when their __class__ is read
    modules = [obj for obj in gc.get_objects() if issubclass(type(obj), torch.nn.Module)]
    children = {id(child) for m in modules for child in m.children()}
    return [
        m for m in modules if id(m) not in children and any(id(p) in wanted for p in m.parameters())
    ]


def variable_names(objects: Sequence[object], frame: Any) -> list[str | None]:
    """The variable that holds each of ``objects`` in the calling code (nearest frame
    first, library frames skipped), or ``None``; read once, at attach time."""
    found: dict[int, str] = {}
    wanted = {id(o) for o in objects}
    while frame is not None and not wanted <= found.keys():
        if not str(frame.f_globals.get("__name__", "")).startswith(_LIBRARIES):
            for scope in (frame.f_locals, frame.f_globals):
                for var, value in list(scope.items()):
                    if id(value) in wanted and not var.startswith("_") and var != "self":
                        found.setdefault(id(value), var)
        frame = frame.f_back
    return [found.get(id(o)) for o in objects]


def root_names(roots: Sequence[torch.nn.Module], frame: Any = None) -> list[str]:
    """A name per root module: the variable that holds it in the calling code (nearest frame
    first), else its class name; made unique."""
    found: dict[int, str] = {}
    frame = frame if frame is not None else sys._getframe(1)
    while frame is not None and not all(id(r) in found for r in roots):
        if str(frame.f_globals.get("__name__", "")).startswith(_LIBRARIES):
            frame = frame.f_back
            continue
        for scope in (frame.f_locals, frame.f_globals):
            for var, value in list(scope.items()):
                if not var.startswith("_") and var != "self" and isinstance(value, torch.nn.Module):
                    found.setdefault(id(value), var)
        frame = frame.f_back
    names: list[str] = []
    for root in roots:
        name = found.get(id(root), type(root).__name__)
        while name in names:
            name += "_"
        names.append(name)
    return names


def _attach(
    optimizers: list[torch.optim.Optimizer], called: torch.nn.Module, args: tuple[Any, ...]
) -> None:
    roots = owning_roots(optimizers)
    owned = {id(p) for r in roots for p in r.parameters()}
    kept = [o for o in optimizers if any(id(p) in owned for p in _params(o))]
    for o in optimizers:
        if o not in kept:
            _state.orphans.append(weakref.ref(o))
            _say(
                f"{type(o).__name__} optimizer holds parameters of no nn.Module; not watched "
                "(call gradwatch.watch(model, optimizer) yourself for such a script)"
            )
    if not kept:
        return
    models: torch.nn.Module | dict[str, torch.nn.Module] = (
        roots[0] if len(roots) == 1 else dict(zip(root_names(roots), roots, strict=True))
    )
    before = set(called._forward_pre_hooks)
    try:
        run = watch(models, kept)
    except ConfigError as exc:
        _say(f"not watched: {exc}")
        return
    _state.runs.append(run)
    _attach_lint(run)
    _refire(called, before, args)
    _announce(run, roots, kept)


def _attach_lint(run: Run) -> None:
    """Store the script's lint findings (written by ``gradwatch run``) with the run, as
    findings with ``source: "lint"``; they reach the server like every other record."""
    path = os.environ.get(ENV_LINT)
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as fh:
            findings = json.load(fh)
    except (OSError, ValueError) as exc:
        _say(f"cannot read the lint findings of this script ({exc}); not stored")
        return
    if isinstance(findings, list) and findings:
        run._io.submit(records.findings_record({"findings": findings}))


def _refire(called: torch.nn.Module, before: set[int], args: tuple[Any, ...]) -> None:
    """Hooks registered during this forward call are not run by torch for it; run the new
    pre-hooks of the module being called once, so the first step has its batch checksum
    and forward time like every later one (keyword inputs are not seen here)."""
    for hook_id, hook in list(called._forward_pre_hooks.items()):
        if hook_id in before:
            continue
        if hook_id in called._forward_pre_hooks_with_kwargs:
            hook(called, args, {})
        else:
            hook(called, args)


def _announce(run: Run, roots: list[torch.nn.Module], optimizers: list[Any]) -> None:
    models = ", ".join(type(r).__name__ for r in roots)
    opts = ", ".join(type(o).__name__ for o in optimizers) or "parameters updated by hand"
    tensors = sum(len(w.params) for w in run._watches)
    _say(
        f"run {run.id} watching {models} with {opts} ({tensors} tensors); "
        f"data in {run.dir}; after the run: gradwatch findings {run.id}"
    )
    manifest = os.environ.get(ENV_MANIFEST)
    if manifest:
        line = json.dumps({"run": run.id, "dir": str(run.dir), "pid": os.getpid()})
        with open(manifest, "a", encoding="utf-8") as out:
            out.write(line + "\n")
