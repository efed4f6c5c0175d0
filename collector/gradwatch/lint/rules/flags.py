"""``requires_grad`` set where it has no effect: ``module-requires-grad`` (the attribute on
an ``nn.Module``, which only tensors read) and ``requires-grad-non-leaf`` (the flag on a
tensor the model computed, which autograd refuses with a RuntimeError)."""

from __future__ import annotations

import ast

from gradwatch.lint.analysis import Analysis, Unit
from gradwatch.lint.kinds import LOSS, MODULE, Scope, own_nodes
from gradwatch.lint.source import text

_MODULE_ITERATORS = {"modules", "children", "named_modules", "named_children"}
# Methods that return the same graph (not a leaf): the flag on their result is still moot.
_SAME_GRAPH = {
    "view", "reshape", "mean", "sum", "squeeze", "unsqueeze", "flatten", "float", "to",
    "contiguous", "transpose", "permute", "clone", "exp", "log", "pow", "mul", "add", "std",
    "var", "norm", "abs", "max", "min", "sigmoid", "softmax", "log_softmax", "tanh", "relu",
}  # fmt: skip
_MODULE_METHODS = {
    "parameters", "named_parameters", "modules", "children", "named_modules", "buffers",
    "zero_grad", "train", "eval", "to", "cuda", "cpu", "half", "float", "double", "apply",
    "state_dict", "load_state_dict", "requires_grad_", "register_buffer", "register_forward_hook",
    "save_pretrained", "generate", "get_input_embeddings", "named_children",
}  # fmt: skip
_PARAMETER_FREE = {
    "CosineSimilarity", "PairwiseDistance", "Softmax", "LogSoftmax", "Softmin", "ReLU", "GELU",
    "LeakyReLU", "SiLU", "Tanh", "Sigmoid", "Dropout", "Dropout2d", "Identity", "Flatten",
    "Unflatten", "MaxPool1d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Upsample",
}  # fmt: skip


def check(a: Analysis) -> None:
    for unit in a.units:
        for node in own_nodes(unit.body):
            target = _flag_target(node)
            if target is None:
                continue
            name = text(target) or ast.unparse(target)
            if is_module(a, unit.scope, target, node):
                a.emit(
                    "module-requires-grad",
                    node,
                    f"`{name}` is a module, and a module's `requires_grad` attribute is read by "
                    "nothing: its parameters stay as they were "
                    f"(use `{name}.requires_grad_(False)`).",
                    unit,
                )
            elif isinstance(target, ast.Name) and _non_leaf(a, unit, target.id, _line(node)):
                a.emit(
                    "requires-grad-non-leaf",
                    node,
                    f"`{name}` was computed by the model, so it is not a leaf: setting its "
                    f"`requires_grad` raises a RuntimeError (use `{name}.detach()` to cut it "
                    "from the graph, or drop the line).",
                    unit,
                )


def _line(node: ast.AST) -> int:
    return int(getattr(node, "lineno", 0))


def _flag_target(node: ast.AST) -> ast.expr | None:
    """``X`` of ``X.requires_grad = ...`` (a plain assignment of the attribute)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        t = node.targets[0]
        if isinstance(t, ast.Attribute) and t.attr == "requires_grad":
            return t.value
    return None


def module_name(scope: Scope, func: ast.expr, *, consumers_only: bool = False) -> str | None:
    """The dotted name of a called module or loss (`model`, `model.encoder`, `self.head`,
    `criterion`) when the name or one of its prefixes is known to hold one; a method of a
    module (`model.parameters`) is not a call of it. ``consumers_only``: only modules that
    transform their input with parameters of their own (not losses, activations, distances)."""
    name = text(func)
    if name is None:
        return None
    parts = name.split(".")
    if len(parts) > 1 and parts[-1] in _MODULE_METHODS:
        return None
    for end in range(len(parts), 0, -1):
        kind = scope.kind(".".join(parts[:end]), allow_guess=False)
        if kind is None:
            continue
        if consumers_only and (kind.kind != MODULE or kind.detail in _PARAMETER_FREE):
            return None
        return name if kind.kind in (MODULE, LOSS) else None
    return None


def is_module(a: Analysis, scope: Scope, target: ast.expr, at: ast.AST) -> bool:
    """Whether ``target`` holds an ``nn.Module``: a known module name itself (not an
    attribute of one, which may be a parameter), or a loop variable over ``.modules()``."""
    name = text(target)
    kind = scope.kind(name, allow_guess=False) if name else None
    if kind is not None:
        return kind.kind == MODULE
    if not isinstance(target, ast.Name):
        return False
    for loop in own_nodes(a.src.tree.body):
        if (
            isinstance(loop, ast.For)
            and any(isinstance(n, ast.Name) and n.id == target.id for n in ast.walk(loop.target))
            and any(n is at for n in ast.walk(loop))
            and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Attribute)
            and loop.iter.func.attr in _MODULE_ITERATORS
        ):
            return True
    return False


def _non_leaf(a: Analysis, unit: Unit, name: str, line: int) -> bool:
    """Whether ``name`` holds a value the model computed with autograd on (not a leaf)."""
    value = unit.scope.value_before(name, line)
    if value is None or unit.no_grad or _assigned_under_no_grad(a, unit, name, line):
        return False
    return model_output(unit.scope, value, 0) is not None


def model_output(scope: Scope, e: ast.expr, depth: int) -> str | None:
    """The module whose output ``e`` is (through names and graph-keeping methods), or None
    for anything else: data, leaves, cut values."""
    if depth > 8:
        return None
    if isinstance(e, ast.Name):
        value = scope.value_before(e.id, getattr(e, "lineno", 10**9))
        return None if value is None else model_output(scope, value, depth + 1)
    if isinstance(e, ast.Subscript):
        return model_output(scope, e.value, depth + 1)
    if isinstance(e, ast.Attribute) and e.attr in ("logits", "loss", "last_hidden_state"):
        return model_output(scope, e.value, depth + 1)
    if not isinstance(e, ast.Call):
        return None
    if isinstance(e.func, ast.Attribute) and e.func.attr in _SAME_GRAPH:
        return model_output(scope, e.func.value, depth + 1)
    return module_name(scope, e.func)


def _assigned_under_no_grad(a: Analysis, unit: Unit, name: str, line: int) -> bool:
    """Whether the last assignment of ``name`` before ``line`` sits in a no_grad block."""
    last: ast.AST | None = None
    for node in own_nodes(unit.body):
        if (
            isinstance(node, ast.Assign)
            and node.lineno < line
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ):
            last = node
    return last is not None and a.under_no_grad(unit, last)
