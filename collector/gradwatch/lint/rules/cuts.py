"""Part of the loss cut from the parameters it should train.

``detached-in-loss-path``: ``.detach()`` (or ``.data``) on the output of a module the
stepped optimizer trains, fed on into another module on the way to the loss (an encoder
detached before its head), or ``.item()`` / ``.numpy()`` / ``.tolist()`` / ``float()`` /
``torch.tensor(...)`` of such an output used as a term of the loss (a constant). A detached
*target* (DQN's TD target, a teacher's or EMA network's output, a GAN's fake batch fed to
the discriminator) is the usual intent and stays silent: only outputs of the modules the
optimizer trains count, and ``.detach()`` only when another module consumes it.

``data-in-loss-path``: ``.data`` of a parameter inside a module's ``forward`` (that
parameter gets no gradient), or a ``.data`` write to the model's parameters between the
forward pass and ``backward()`` (autograd does not see it; the gradient uses stale values).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TypeGuard

from gradwatch.lint.analysis import Analysis, Unit
from gradwatch.lint.facts import BACKWARD, STEP, Event
from gradwatch.lint.kinds import Scope, own_nodes
from gradwatch.lint.rules.flags import model_output, module_name
from gradwatch.lint.source import text

_CONSTANT = {"item", "numpy", "tolist"}
_REWRAP = {"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor"}
_LOGGING = {"print", "log", "log_dict", "info", "debug", "append", "add_scalar", "write"}


def check(a: Analysis) -> None:
    for unit in a.units:
        events = a.events(unit)
        for e in events:
            if e.kind == BACKWARD and e.via is None and e.operand is not None:
                roots = _trained_roots(events, e.at)
                for node, why in _cuts(a, unit.scope, e.operand, roots, None, 0):
                    a.emit("detached-in-loss-path", node, why, unit)
        _data_in_forward(a, unit)
        _data_writes_before_backward(a, unit)


def _trained_roots(events: list[Event], backward: tuple[int, int]) -> tuple[str, ...]:
    """The modules trained by the optimizers that apply the gradients of the backward() at
    ``backward`` (line, column): those stepped after it and before the next backward (a
    GAN's two optimizers each own one loss); every stepped optimizer when none follows it."""
    steps = [e for e in events if e.kind == STEP and e.tkind is not None and e.tkind.roots]
    later = [b.at for b in events if b.kind == BACKWARD and b.at > backward]
    until = min(later, default=(10**9, 0))
    mine = [e for e in steps if backward < e.at < until] or steps
    return tuple(r for e in mine for r in (e.tkind.roots if e.tkind and e.tkind.roots else ()))


def _trained(name: str | None, roots: tuple[str, ...]) -> bool:
    return name is not None and any(name == r or name.startswith(r + ".") for r in roots)


def _cuts(
    a: Analysis, scope: Scope, e: ast.expr, roots: tuple[str, ...], into: str | None, depth: int
) -> Iterator[tuple[ast.AST, str]]:
    """The cuts on the way from the loss ``e`` back to the trained modules' outputs; ``into``
    is the module that consumes ``e`` on that way, if any."""
    if depth > 10:
        return
    if isinstance(e, ast.Name):
        value = scope.value_before(e.id, getattr(e, "lineno", 10**9))
        if value is not None:
            yield from _cuts(a, scope, value, roots, into, depth + 1)
        return
    if isinstance(e, ast.Call):
        cut = _cut_of(a, e)
        if cut is not None:
            kind, inner = cut
            source = model_output(scope, inner, 0)
            if _trained(source, roots) and (kind != "detach" or _fed_on(source, into)):
                yield e, _message(kind, ast.unparse(e), source or "")
            return
        module = module_name(scope, e.func, consumers_only=True)
        for arg in [*e.args, *(k.value for k in e.keywords)]:
            yield from _cuts(a, scope, arg, roots, module or into, depth + 1)
        if isinstance(e.func, ast.Attribute) and module_name(scope, e.func) is None:
            yield from _cuts(a, scope, e.func.value, roots, into, depth + 1)
        return
    for child in ast.iter_child_nodes(e):
        if isinstance(child, ast.expr):
            yield from _cuts(a, scope, child, roots, into, depth + 1)


def _fed_on(source: str | None, into: str | None) -> bool:
    """A detached output fed into another module; into the module that made it, it is a
    recurrent state cut on purpose (truncated backpropagation through time)."""
    return source is not None and into is not None and not _related(source, into)


def _cut_of(a: Analysis, c: ast.Call) -> tuple[str, ast.expr] | None:
    """``(kind, cut value)`` when the call cuts its value from the graph."""
    if isinstance(c.func, ast.Attribute) and c.func.attr == "detach":
        return "detach", c.func.value
    if isinstance(c.func, ast.Attribute) and c.func.attr in _CONSTANT:
        return c.func.attr, c.func.value
    if isinstance(c.func, ast.Name) and c.func.id == "float" and c.args:
        return "float", c.args[0]
    if (a.src.qualname(c.func) or "") in _REWRAP and c.args:
        return "tensor", _first_tensor(c.args[0])
    return None


def _first_tensor(e: ast.expr) -> ast.expr:
    """``[out.sum(), ...]`` -> ``out.sum()``: torch.tensor's argument is often a list."""
    while True:
        if isinstance(e, ast.List | ast.Tuple) and e.elts:
            e = e.elts[0]
        elif isinstance(e, ast.ListComp | ast.GeneratorExp):
            e = e.elt
        else:
            return e


def _message(kind: str, code: str, source: str) -> str:
    if kind == "detach":
        return (
            f"`{code}` cuts `{source}`'s output from the graph before the next module uses it: "
            f"the loss sends no gradient into `{source}`, which the optimizer trains."
        )
    return (
        f"`{code}` turns `{source}`'s output into a constant with no history: this term of "
        f"the loss sends no gradient into `{source}` (use the tensor itself)."
    )


# -- .data -----------------------------------------------------------------------------------
def _data_in_forward(a: Analysis, unit: Unit) -> None:
    node = unit.node
    cls = unit.scope.cls
    if not (isinstance(node, ast.FunctionDef) and node.name == "forward" and cls is not None):
        return
    if not a.src.is_module_class(cls.name) or unit.no_grad:
        return
    for stmt in own_nodes(unit.body):
        if not isinstance(stmt, ast.Return | ast.Assign) or _to_self(stmt):
            continue
        for sub in ast.walk(stmt.value) if stmt.value is not None else ():
            if _param_data(sub) and not a.under_no_grad(unit, stmt) and not _logged(stmt):
                a.emit(
                    "data-in-loss-path",
                    sub,
                    f"`{ast.unparse(sub)}` in forward() reads the parameter outside autograd: "
                    f"the loss sends it no gradient, so it never trains (use "
                    f"`{ast.unparse(sub.value)}` itself).",
                    unit,
                )


def _param_data(e: ast.AST) -> TypeGuard[ast.Attribute]:
    """``self.w.data`` / ``self.fc.weight.data`` read (not ``self.x.data.copy_(...)``)."""
    return (
        isinstance(e, ast.Attribute)
        and e.attr == "data"
        and isinstance(e.ctx, ast.Load)
        and (text(e.value) or "").startswith("self.")
    )


def _to_self(stmt: ast.stmt) -> bool:
    """An assignment to ``self.x`` (a buffer or statistic, not the loss path)."""
    return isinstance(stmt, ast.Assign) and all(
        (text(t) or "").startswith("self.") for t in stmt.targets
    )


def _logged(stmt: ast.stmt) -> bool:
    for sub in ast.walk(stmt):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute | ast.Name):
            last = (text(sub.func) or "").rsplit(".", 1)[-1]
            if last in _LOGGING or last in _CONSTANT:
                return True
    return False


def _data_writes_before_backward(a: Analysis, unit: Unit) -> None:
    """``p.data.mul_(...)`` / ``model.w.data = ...`` after a forward call of that module
    whose graph a later backward() consumes (no backward in between)."""
    backward = [e.line for e in a.events(unit) if e.kind == BACKWARD]
    if not backward:
        return
    calls = [
        (n.lineno, name)
        for n in own_nodes(unit.body)
        if isinstance(n, ast.Call) and (name := module_name(unit.scope, n.func)) is not None
    ]
    for node in own_nodes(unit.body):
        write = _data_write(unit.scope, node)
        if write is None:
            continue
        code, owner = write
        line = node.lineno  # type: ignore[attr-defined]
        since = max((b for b in backward if b < line), default=0)
        forward = any(since < f < line and _related(m, owner) for f, m in calls)
        if forward and any(b > line for b in backward):
            a.emit(
                "data-in-loss-path",
                node,
                f"`{code}` changes a parameter between the forward pass and backward() behind "
                "autograd's back: the gradient is computed against values that are no longer "
                "there (change parameters after optimizer.step()).",
                unit,
            )


def _related(called: str, owner: str) -> bool:
    return called == owner or called.startswith(owner + ".") or owner.startswith(called + ".")


def _data_write(scope: Scope, node: ast.AST) -> tuple[str, str] | None:
    """``(X.data, owning module)`` for a statement writing ``X.data``, X a parameter of a
    known module."""
    target: ast.expr | None = None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_"):
            target = func.value
    if not (isinstance(target, ast.Attribute) and target.attr == "data"):
        return None
    owner = text(target.value) or ""
    module = module_name(scope, target.value) or _param_loop_owner(scope, owner, node)
    return (ast.unparse(target), module) if module else None


def _param_loop_owner(scope: Scope, name: str, at: ast.AST) -> str | None:
    """``model`` when ``name`` is the variable of the loop over ``model.parameters()``
    around ``at``."""
    for node in ast.walk(scope.node):
        if (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and isinstance(node.iter, ast.Call)
            and isinstance(node.iter.func, ast.Attribute)
            and node.iter.func.attr == "parameters"
            and any(n is at for n in ast.walk(node))
        ):
            return text(node.iter.func.value)
    return None
