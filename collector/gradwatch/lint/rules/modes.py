"""Module mode rules: ``eval-mode-training`` (a model left in ``eval()`` is trained) and
``inference-in-train-mode`` (a validation loop runs the model in training mode)."""

from __future__ import annotations

import ast
import builtins
import re

from gradwatch.core import checkids
from gradwatch.lint.analysis import Analysis, Unit
from gradwatch.lint.facts import BACKWARD, CALL, EVAL, STEP, TRAIN, Event
from gradwatch.lint.kinds import AVERAGER, MODULE
from gradwatch.lint.rules.lifecycle import related
from gradwatch.lint.source import text

_MODEL_NAME = re.compile(
    r"model|net|encoder|decoder|backbone|classifier|generator|discriminator|policy|critic|"
    r"actor|^[GD]$",
    re.IGNORECASE,
)
_NOT_MODEL = re.compile(r"loss|criterion|metric|optim|sched", re.IGNORECASE)
#: Layers (and containers, judged by what they hold) whose output depends on train/eval mode.
_MODE_DEPENDENT = re.compile(
    r"Dropout|BatchNorm|InstanceNorm|RNN|LSTM|GRU|Transformer|MultiheadAttention|dropout|"
    r"batch_norm|instance_norm"
)
_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")
_BUILTINS = set(dir(builtins))
_NO_MODULES = {
    "torch", "collections", "numpy", "math", "random", "itertools", "queue", "copy", "gym",
    "gymnasium", "dataclasses", "typing",
}  # fmt: skip


def sets_train(train: Event, model: str) -> bool:
    """Whether ``train.target.train()`` puts ``model`` in training mode."""
    return train.target is None or train.target == model or model.startswith(train.target + ".")


def check(a: Analysis) -> None:
    for unit in a.lifecycle_units():
        for loop in unit.loops:
            _stuck_in_eval(a, unit, loop, a.events(unit, loop))
        _inference(a, unit)


def _feeds_backward(ev: list[Event], model: str) -> bool:
    """Whether ``model(...)`` is called before some ``backward()`` of the loop."""
    called = [i for i, e in enumerate(ev) if e.kind == CALL and e.target == model]
    return any(e.kind == BACKWARD and called and i > called[0] for i, e in enumerate(ev))


def _whole_model(target: str | None) -> bool:
    """``model`` or ``self.model``, not ``model.backbone`` (frozen-BN fine-tuning)."""
    return bool(target) and (target or "").removeprefix("self.").count(".") == 0


def _stuck_in_eval(a: Analysis, unit: Unit, loop: ast.AST, ev: list[Event]) -> None:
    training = [i for i, e in enumerate(ev) if e.kind in (BACKWARD, STEP) and not e.closure]
    steps = [e for e in ev if e.kind == STEP]
    if not training or not steps or not any(e.kind == BACKWARD for e in ev):
        return
    roots = [r for st in steps for r in ((st.tkind.roots if st.tkind else None) or ())]
    known = all(st.tkind is not None and st.tkind.roots for st in steps)
    for i, e in enumerate(ev):
        if e.kind != EVAL or not _whole_model(e.target):
            continue
        model = e.target or ""
        if known and not any(related(model, r) for r in roots):
            continue  # a teacher, an EMA copy, a target network: not the trained model
        if not known and not _feeds_backward(ev, model):
            continue  # parameters not visible: only a model whose output is backpropagated
        order = list(range(i + 1, len(ev))) + list(range(i))
        for j in order:
            f = ev[j]
            if f.kind == TRAIN and sets_train(f, model):
                break
            if j in training:
                where = f" (in {e.via}())" if e.via else ""
                a.emit(
                    checkids.EVAL_MODE_TRAINING,
                    e.node,
                    f"{model}.eval(){where} is followed by training (line {f.line}) with no "
                    f"{model}.train() in between: dropout and batch norm stay in eval mode "
                    "for every later epoch.",
                    unit,
                    severity=None if known else "warning",
                    confidence="high" if known else "medium",
                    loop=loop,
                )
                break


def _model_like(e: Event) -> bool:
    if e.target is None:
        return False
    if e.tkind is not None:
        return e.tkind.kind in (MODULE, AVERAGER)  # an averaged copy is a model too
    last = e.target.rsplit(".", 1)[-1]
    return bool(_MODEL_NAME.search(last)) and not _NOT_MODEL.search(last)


def mode_free(a: Analysis, built: ast.expr | None, seen: set[str]) -> bool:
    """Whether the module ``built`` (the call that made it) is visibly the same in train
    and eval mode: torch.nn layers with no dropout, batch norm or recurrent dropout,
    containers of such layers, same-file classes made only of them. Anything not visible
    (a model from another file, torchvision, a parameter) is not mode-free."""
    if not isinstance(built, ast.Call):
        return False
    q = a.src.qualname(built.func) or ""
    name = q.rsplit(".", 1)[-1] if q else (text(built.func) or "")
    if q.startswith("torch.nn.") and name[:1].isupper():
        if _MODE_DEPENDENT.search(name):
            return False
        if name in _CONTAINERS:
            return all(
                isinstance(arg, ast.Call) and mode_free(a, arg, seen)
                for node in built.args
                for arg in (node.elts if isinstance(node, ast.List | ast.Tuple) else [node])
            )
        return True
    cls = a.src.classes.get(name) if isinstance(built.func, ast.Name) else None
    if cls is None or name in seen or not a.src.is_module_class(name):
        return False
    seen.add(name)
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and node.attr == "training":
            return False  # the class branches on its own mode
        if isinstance(node, ast.Attribute | ast.Name) and _MODE_DEPENDENT.search(text(node) or ""):
            return False
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and any((text(t) or "").startswith("self.") for t in node.targets)
        ):
            sub = node.value
            sub_q = a.src.qualname(sub.func) or ""
            own = sub.func.id if isinstance(sub.func, ast.Name) else ""
            local = own in a.src.classes
            if sub_q.startswith("torch.nn.") or (local and a.src.is_module_class(own)):
                if not mode_free(a, sub, seen):
                    return False
            elif not local and not _never_module(sub_q, sub.func):
                return False  # a part built elsewhere: its layers are not visible
    return True


def _constructs(a: Analysis, target: str | None) -> bool:
    """Whether calling ``target`` builds an object rather than running a model: a class of
    this file, an imported CamelCase class, a ``namedtuple`` (``ModelPrediction(...)``)."""
    if not target or "." in target:
        return False
    if target in a.src.classes:
        return True
    q = a.src.qualname(ast.Name(target)) or ""
    last = q.rsplit(".", 1)[-1]
    if q and last[:1].isupper() and any(ch.islower() for ch in last):
        return True
    value = a.module.value_before(target, 10**9)
    return isinstance(value, ast.Call) and (a.src.qualname(value.func) or "").endswith(
        ("namedtuple", "NamedTuple")
    )


def _never_module(q: str, func: ast.expr) -> bool:
    """Callables that never build a module: builtins, torch outside ``torch.nn``, the
    standard library's containers and numeric libraries, RL environments."""
    if not q:
        return isinstance(func, ast.Name) and func.id in _BUILTINS
    return q.split(".")[0] in _NO_MODULES


def _inference(a: Analysis, unit: Unit) -> None:
    """Judged where the model's mode is visible: in a function's callers (one level), or
    in the module's own code; a function nobody in this file calls is left alone."""
    ev = a.events(unit)
    # a module's own methods run its submodules in whatever mode the module's holder set
    # (a diffusion model's sampling loop; the trainer calls ema_model.eval() first)
    own = unit.scope.cls is not None and a.src.is_module_class(unit.scope.cls.name)
    trained_loops = {loop for e in ev if e.kind in (BACKWARD, STEP) for loop in e.loops}
    evals: list[tuple[int, str]] = [
        (i, e.target) for i, e in enumerate(ev) if e.kind == EVAL and e.target is not None
    ]
    for i, e in enumerate(ev):
        if e.kind != CALL or not e.no_grad or not e.data_loop:
            continue
        if e.via is None and not unit.is_module:
            continue  # judged at the call sites of this function
        if e.loops[-1] in trained_loops or not _model_like(e) or _constructs(a, e.target):
            continue
        model = e.target or ""
        if own and (model == "self" or model.startswith("self.")):
            continue
        if any(j < i and (t == model or model.startswith(t + ".")) for j, t in evals):
            continue
        if e.tkind is not None and mode_free(a, e.tkind.value, set()):
            continue  # every layer is visible and none behaves differently in eval()
        where = f"{e.via}()" if e.via else "this loop"
        a.emit(
            "inference-in-train-mode",
            e.node,
            f"{model} runs under no_grad in {where} without {model}.eval() before it: "
            f"{_train_mode_effect(_mode_layers(a, e.tkind.value if e.tkind else None))}.",
            unit,
        )


_DROPOUT = re.compile(r"Dropout|dropout")
_NORM = re.compile(r"BatchNorm|InstanceNorm|batch_norm|instance_norm")


def _mode_layers(a: Analysis, built: ast.expr | None) -> set[str]:
    """The names of mode-dependent layers visible in the module ``built`` makes: its own
    class name, and the names used in same-file classes it is made of (empty when nothing is
    visible — a model from another file)."""
    found: set[str] = set()
    todo = [built] if isinstance(built, ast.Call) else []
    seen: set[str] = set()
    while todo:
        call = todo.pop()
        q = a.src.qualname(call.func) or ""
        name = q.rsplit(".", 1)[-1] if q else (text(call.func) or "")
        found.update(_MODE_DEPENDENT.findall(name))
        cls = a.src.classes.get(name) if isinstance(call.func, ast.Name) else None
        if cls is None or name in seen:
            continue
        seen.add(name)
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute | ast.Name):
                found.update(_MODE_DEPENDENT.findall(text(node) or ""))
            if isinstance(node, ast.Call):
                todo.append(node)
    return found


def _train_mode_effect(layers: set[str]) -> str:
    """What train mode changes in validation, for the layers the model visibly has."""
    if layers and all(_NORM.search(x) for x in layers):
        return (
            "batch norm normalises with each validation batch's own statistics and updates "
            "its running statistics on validation data"
        )
    if layers and all(_DROPOUT.search(x) for x in layers):
        return "dropout stays active, so validation results are noisy and too pessimistic"
    if layers:
        return "dropout stays active and batch norm updates its statistics on validation data"
    # the model's layers are not visible here (its class is in another file): say what
    # train mode would change without claiming the model has those layers
    return "any dropout stays active and any batch norm updates its statistics on validation data"
