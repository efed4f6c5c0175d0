"""Set-up rules: ``param-not-in-optimizer`` (a layer swapped or unfrozen after the
optimizer was built, or an optimizer built over a copy of the model that never runs
forward), ``sampler-epoch-not-set`` and ``unseeded-run``."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from gradwatch.core import checkids
from gradwatch.lint.analysis import Analysis, Unit
from gradwatch.lint.facts import BACKWARD, CALL, STEP
from gradwatch.lint.kinds import MODULE, OPTIMIZER, own_nodes
from gradwatch.lint.rules.lifecycle import related
from gradwatch.lint.source import text

_SEEDERS = ("manual_seed", "seed_everything", "set_seed", "seed_all", "set_random_seed")
_NO_PARAMS = ("Identity", "ReLU", "Dropout", "Flatten")


@dataclass
class _Built:
    name: str
    roots: tuple[str, ...]
    filtered: bool
    line: int


def check(a: Analysis) -> None:
    for unit in a.units:
        _late_changes(a, unit)
    _copy_trained(a)
    _sampler(a)
    _seed(a)


def _late_changes(a: Analysis, unit: Unit) -> None:
    built: list[_Built] = []
    nodes = own_nodes(unit.body)
    loopvars: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            it = node.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
                root = text(_unsubscript(it.func.value))
                if it.func.attr == "parameters" and root:
                    loopvars[node.target.id] = root
        if not isinstance(node, ast.Assign | ast.Expr):
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            name = text(node.targets[0])
            kind = unit.scope.classify(node.value, node.lineno)
            if name and kind is not None and kind.kind == OPTIMIZER and kind.roots:
                built = [b for b in built if b.name != name]
                built.append(_Built(name, kind.roots, kind.filtered, node.lineno))
                continue
        for b in built:
            what = _swap(a, unit, node, b) or _unfreeze(node, b, loopvars)
            if what and not _rebuilt(a, unit, nodes, b, node.lineno):
                a.emit(
                    checkids.PARAM_NOT_IN_OPTIMIZER,
                    node,
                    f"{what} after {b.name} was built (line {b.line}) from "
                    f"{', '.join(b.roots)}: the optimizer never updates those parameters.",
                    unit,
                )


def _copy_trained(a: Analysis) -> None:
    """An optimizer built over ``ema_model = copy.deepcopy(model)`` while the training loop
    runs ``model``: the loss's gradients land on ``model``, which no optimizer holds, and
    the optimizer steps a copy with no gradients. Judged on the loops that step the
    optimizer: the copy is never called there (nor handed to code not visible here), the
    original is, and no optimizer of the file holds the original's parameters."""
    copies: dict[str, str] = {}
    built: list[tuple[Unit, ast.Assign, str, tuple[str, ...]]] = []
    for unit in a.units:
        for node in own_nodes(unit.body):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            name = text(node.targets[0])
            value = node.value
            if not name or not isinstance(value, ast.Call):
                continue
            if a.src.qualname(value.func) == "copy.deepcopy" and value.args:
                original = text(value.args[0])
                if original:
                    copies[name] = original
                continue
            kind = unit.scope.classify(value, node.lineno)
            if kind is not None and kind.kind == OPTIMIZER and kind.roots:
                built.append((unit, node, name, kind.roots))
    if not copies:
        return
    held = {r for _, _, _, roots in built for r in roots}
    for unit, node, name, roots in built:
        for root in roots:
            original = copies.get(root)
            if original is None or any(related(original, h) for h in held):
                continue
            if _runs_instead(a, name, root, original):
                a.emit(
                    checkids.PARAM_NOT_IN_OPTIMIZER,
                    node,
                    f"{name} is built from {root}.parameters(), but the parameters belong to a "
                    f"second copy of the model (`{root}`, a deepcopy of `{original}`), which "
                    f"is never called in forward: {original} computes the loss, and no "
                    "optimizer updates its parameters.",
                    unit,
                )
                break


def _runs_instead(a: Analysis, opt: str, copy: str, original: str) -> bool:
    """Whether every loop that steps ``opt`` runs ``original`` and never ``copy``."""
    judged = False
    for unit in a.lifecycle_units():
        for loop in unit.loops:
            ev = a.events(unit, loop)
            if not any(e.kind == STEP and e.target == opt for e in ev) or not any(
                e.kind == BACKWARD for e in ev
            ):
                continue
            calls = [e for e in ev if e.kind == CALL]
            runs = (copy, f"{copy}.forward", f"{copy}.module")
            if any(e.target in runs or copy in e.args for e in calls):
                return False  # called, or handed to code that may call it
            if not any(e.target in (original, f"{original}.forward") for e in calls):
                return False
            judged = True
    return judged


def _swap(a: Analysis, unit: Unit, node: ast.stmt, b: _Built) -> str:
    if not isinstance(node, ast.Assign):
        return ""
    target = node.targets[0]
    base = target.value if isinstance(target, ast.Subscript) else target
    dotted = text(base) if isinstance(target, ast.Subscript) else text(target)
    if dotted is None or not isinstance(target, ast.Attribute | ast.Subscript):
        return ""
    kind = unit.scope.classify(node.value, node.lineno)
    if kind is None or kind.kind != MODULE or kind.detail in _NO_PARAMS:
        return ""
    if any(related(dotted, r) for r in b.roots):
        return f"{ast.unparse(target)} is replaced by a new {kind.detail or 'module'}"
    return ""


def _unfreeze(node: ast.stmt, b: _Built, loopvars: dict[str, str]) -> str:
    if not b.filtered:
        return ""  # frozen parameters are in the optimizer already; unfreezing works
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        call = node.value
        if isinstance(call.func, ast.Attribute) and call.func.attr == "requires_grad_":
            on = not call.args or (isinstance(call.args[0], ast.Constant) and call.args[0].value)
            recv = text(_unsubscript(call.func.value)) or ""
            recv = loopvars.get(recv, recv)
            if on and any(related(recv, r) for r in b.roots):
                return f"{ast.unparse(call.func.value)} is unfrozen"
    if isinstance(node, ast.Assign):
        t = node.targets[0]
        v = node.value
        if (
            isinstance(t, ast.Attribute)
            and t.attr == "requires_grad"
            and isinstance(v, ast.Constant)
            and v.value is True
        ):
            recv = text(_unsubscript(t.value)) or ""
            recv = loopvars.get(recv, recv)
            if any(related(recv, r) for r in b.roots):
                return f"{ast.unparse(t.value)} is unfrozen"
    return ""


def _unsubscript(e: ast.expr) -> ast.expr:
    while isinstance(e, ast.Subscript):
        e = e.value
    return e


def _rebuilt(a: Analysis, unit: Unit, nodes: list[ast.AST], b: _Built, after: int) -> bool:
    for node in nodes:
        if (
            isinstance(node, ast.Assign)
            and node.lineno > after
            and any(text(t) == b.name for t in node.targets)
        ):
            return True
        if isinstance(node, ast.Call) and getattr(node, "lineno", 0) > after:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "add_param_group":
                return True
    return False


def _sampler(a: Analysis) -> None:
    if a.src.uses("lightning", "pytorch_lightning", "accelerate", "transformers"):
        return  # the framework calls set_epoch
    calls = [n for n in ast.walk(a.src.tree) if isinstance(n, ast.Call)]
    if any(isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch" for c in calls):
        return
    if not any(e.kind in (BACKWARD, STEP) for u in a.units for e in a.events(u)):
        return  # a loader factory (timm's create_loader): the file that trains sets the epoch
    for c in calls:
        name = (a.src.qualname(c.func) or text(c.func) or "").rsplit(".", 1)[-1]
        shuffle_off = any(
            k.arg == "shuffle" and isinstance(k.value, ast.Constant) and not k.value.value
            for k in c.keywords
        )
        if name == "DistributedSampler" and not shuffle_off:
            a.emit(
                "sampler-epoch-not-set",
                c,
                "this DistributedSampler shuffles, but set_epoch() is never called: every "
                "epoch sees the data in the same order.",
                a.units[0],
            )


def _seed(a: Analysis) -> None:
    calls = [n for n in ast.walk(a.src.tree) if isinstance(n, ast.Call)]
    for c in calls:
        name = (text(c.func) or "").rsplit(".", 1)[-1].lower()
        if name.endswith(_SEEDERS) or "seed" in name:
            return
    is_script = any(
        isinstance(s, ast.If) and "__main__" in ast.unparse(s.test) for s in a.src.tree.body
    )
    module = a.events(a.units[0])
    if not is_script and not any(e.kind == STEP for e in module):
        return
    for unit in [a.units[0], *a.lifecycle_units()]:
        ev = a.events(unit)
        steps = [e for e in ev if e.kind == STEP and e.via is None]
        if steps and any(e.kind == BACKWARD for e in ev):
            a.emit(
                "unseeded-run",
                steps[0].node,
                "this script trains but never seeds torch: weight initialisation, dropout and "
                "shuffling differ on every run, so runs cannot be reproduced or compared.",
                unit,
            )
            return
