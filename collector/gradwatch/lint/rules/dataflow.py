"""Local-dataflow rules: ``loss-detached``, ``softmax-into-cross-entropy`` and
``sigmoid-into-bce-with-logits``. Values are followed through the assignments of the
function (and a same-file model's ``forward`` or ``nn.Sequential`` for the loss rules)."""

from __future__ import annotations

import ast

from gradwatch.lint.analysis import Analysis, Unit
from gradwatch.lint.facts import BACKWARD
from gradwatch.lint.kinds import (
    LOSS,
    MODULE,
    OPTIMIZER,
    SCALER,
    Scope,
    function_scope,
    own_nodes,
)
from gradwatch.lint.source import text

CUT, LIVE, NONE = "cut", "live", "none"
_CUT_METHODS = {"detach", "item", "numpy", "tolist"}
_CUT_CALLS = {"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor"}
_KEEP = {
    "mean", "sum", "view", "reshape", "pow", "abs", "squeeze", "unsqueeze", "float", "double",
    "half", "to", "clone", "exp", "log", "sqrt", "neg", "flatten", "contiguous", "cuda", "cpu",
    "type", "t", "transpose", "permute", "max", "min", "norm", "clamp", "mul", "add", "sub",
    "div", "requires_grad_", "view_as", "expand", "expand_as", "squeeze_", "unsqueeze_",
}  # fmt: skip
_LOSSES = {
    "CrossEntropyLoss": "ce", "cross_entropy": "ce", "NLLLoss": "nll", "nll_loss": "nll",
    "BCEWithLogitsLoss": "bce", "binary_cross_entropy_with_logits": "bce",
}  # fmt: skip
_ACTIVATIONS = {
    "softmax": "softmax",
    "Softmax": "softmax",
    "log_softmax": "log_softmax",
    "LogSoftmax": "log_softmax",
    "sigmoid": "sigmoid",
    "Sigmoid": "sigmoid",
}


def check(a: Analysis) -> None:
    for unit in a.units:
        for e in a.events(unit):
            if e.kind == BACKWARD and e.via is None and e.operand is not None:
                reasons: list[str] = []
                if flow(a, unit.scope, e.operand, e.line, reasons, 0) == CUT:
                    a.emit(
                        "loss-detached",
                        e.node,
                        f"backward() is called on a value cut from the model's graph "
                        f"({reasons[0]}): no gradient reaches the model's parameters.",
                        unit,
                    )
        _losses(a, unit)


def trainable_leaves(a: Analysis) -> set[str]:
    """Tensors an optimizer trains directly: those handed to an optimizer's constructor
    (SAC's ``Adam([self.log_alpha])``) and ``nn.Parameter`` attributes. A loss through one
    is live even when every other part of it is detached (``(log_alpha.exp() *
    (log_prob + target).detach()).mean()``); a tensor merely marked ``requires_grad`` and
    trained by nobody is not (the rewrapped-loss bug)."""
    cached = getattr(a, "_trainable_leaves", None)
    if isinstance(cached, set):
        return cached
    out: set[str] = set()
    for node in ast.walk(a.src.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            q = a.src.qualname(node.value.func) or ""
            if q.endswith(".Parameter"):
                out |= {text(t) or "" for t in node.targets}
        if isinstance(node, ast.Call):
            kind = a.module.classify(node)
            if kind is not None and kind.kind == OPTIMIZER and not kind.many:
                given = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "params")]
                for g in given:  # Adam([self.log_alpha]), Adam(params=[w, b]), Adam(w_list)
                    seq = g.elts if isinstance(g, ast.List | ast.Tuple) else [g]
                    out |= {text(n) or "" for n in seq}
    out.discard("")
    a._trainable_leaves = out  # type: ignore[attr-defined]
    return out


def flow(a: Analysis, scope: Scope, e: ast.expr, line: int, why: list[str], depth: int) -> str:
    """Whether ``e`` carries the model's graph (live), was cut from it, or holds data only."""
    if depth > 8:
        return LIVE
    if isinstance(e, ast.Constant):
        return NONE
    if isinstance(e, ast.Name | ast.Attribute) and text(e) in trainable_leaves(a):
        return LIVE
    if isinstance(e, ast.Attribute):
        if e.attr == "data":
            why.append(f"`{ast.unparse(e)}`")
            return CUT
        return flow(a, scope, e.value, line, why, depth + 1)
    if isinstance(e, ast.Name):
        value = scope.value_before(e.id, line)
        if value is None or isinstance(value, ast.Constant):
            return NONE
        return flow(a, scope, value, getattr(value, "lineno", line), why, depth + 1)
    if isinstance(e, ast.Call):
        return _call_flow(a, scope, e, line, why, depth)
    parts: list[ast.expr] = []
    if isinstance(e, ast.BinOp):
        parts = [e.left, e.right]
    elif isinstance(e, ast.UnaryOp):
        parts = [e.operand]
    elif isinstance(e, ast.Subscript):
        parts = [e.value]
    elif isinstance(e, ast.IfExp):
        parts = [e.body, e.orelse]
    elif isinstance(e, ast.Tuple | ast.List):
        parts = list(e.elts)
    else:
        return LIVE
    return _combine([flow(a, scope, p, line, why, depth + 1) for p in parts])


def _call_flow(
    a: Analysis, scope: Scope, c: ast.Call, line: int, why: list[str], depth: int
) -> str:
    q = a.src.qualname(c.func) or ""
    args = [*c.args, *(k.value for k in c.keywords if k.arg not in ("requires_grad", "dtype"))]
    if q in _CUT_CALLS or q.endswith("autograd.Variable") or q == "torch.autograd.Variable":
        if q.endswith("Variable") and args:
            return flow(a, scope, args[0], line, why, depth + 1)
        why.append(f"`{ast.unparse(c)}` is a new tensor with no history")
        return CUT
    if isinstance(c.func, ast.Attribute) and not q:
        if c.func.attr == "scale" and _is_scaler(scope, c.func.value) and c.args:
            return flow(a, scope, c.args[0], line, why, depth + 1)  # scaler.scale(loss)
        if c.func.attr in _CUT_METHODS:
            why.append(f"`.{c.func.attr}()` at line {c.lineno}")
            return CUT
        if c.func.attr in _KEEP:
            parts = [c.func.value, *args]
            return _combine([flow(a, scope, p, line, why, depth + 1) for p in parts])
        return LIVE
    if isinstance(c.func, ast.Name) and c.func.id in ("float", "int"):
        why.append(f"`{c.func.id}(...)` at line {c.lineno}")
        return CUT
    kind = scope.kind(text(c.func), allow_guess=False)
    is_loss = kind is not None and kind.kind == LOSS
    inline_loss = isinstance(c.func, ast.Call) and (a.src.qualname(c.func.func) or "").endswith(
        "Loss"
    )
    if (
        q.startswith("torch.")
        or is_loss
        or inline_loss
        or (isinstance(c.func, ast.Name) and c.func.id in ("sum", "max", "min", "abs"))
    ):
        return _combine([flow(a, scope, p, line, why, depth + 1) for p in args])
    return LIVE


def _is_scaler(scope: Scope, e: ast.expr) -> bool:
    kind = scope.kind(text(e))
    return kind is not None and kind.kind == SCALER


def _combine(states: list[str]) -> str:
    if LIVE in states:
        return LIVE
    return CUT if CUT in states else NONE


# -- activations into losses --------------------------------------------------------------------
def _losses(a: Analysis, unit: Unit) -> None:
    for node in own_nodes(unit.body):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        loss = _loss_kind(a, unit.scope, node)
        if loss is None:
            continue
        act, through_model = activation(a, unit.scope, node.args[0], node.lineno, 0)
        rule, message = "", ""
        if loss == "ce" and act == "softmax":
            rule = "softmax-into-cross-entropy"
            message = "CrossEntropyLoss gets softmax probabilities but applies log-softmax itself"
        elif loss == "nll" and act == "softmax":
            rule = "softmax-into-cross-entropy"
            message = "NLLLoss gets softmax probabilities but expects log-probabilities"
        elif loss == "bce" and act == "sigmoid":
            rule = "sigmoid-into-bce-with-logits"
            message = "BCEWithLogitsLoss gets sigmoid outputs but applies sigmoid itself"
        if rule:
            where = " (the model's forward ends in it)" if through_model else ""
            a.emit(
                rule,
                node,
                f"{message}{where}: the loss is squashed and gradients are weak, training "
                "runs but learns slowly or stalls.",
                unit,
                severity="warning" if through_model else None,
                confidence="medium" if through_model else "high",
            )


def _loss_kind(a: Analysis, scope: Scope, c: ast.Call) -> str | None:
    func = c.func.func if isinstance(c.func, ast.Call) else c.func
    q = a.src.qualname(func) or ""
    if q.startswith("torch.nn."):
        return _LOSSES.get(q.rsplit(".", 1)[-1])
    kind = scope.kind(text(func), allow_guess=False)
    if kind is not None and kind.kind == LOSS:
        return _LOSSES.get(kind.detail)
    return None


def activation(a: Analysis, scope: Scope, e: ast.expr, line: int, depth: int) -> tuple[str, bool]:
    """The activation ``e`` was last passed through (``softmax``...), and whether that was
    inside a model (its ``forward`` or an ``nn.Sequential``)."""
    if depth > 6:
        return "", False
    if isinstance(e, ast.Name):
        value = scope.value_before(e.id, line)
        if value is None:
            return "", False
        return activation(a, scope, value, getattr(value, "lineno", line), depth + 1)
    if not isinstance(e, ast.Call):
        return "", False
    func = e.func
    if isinstance(func, ast.Call):  # nn.Softmax(dim=1)(x)
        name = (a.src.qualname(func.func) or "").rsplit(".", 1)[-1]
        return _ACTIVATIONS.get(name, ""), False
    if isinstance(func, ast.Attribute) and func.attr in _ACTIVATIONS:
        return _ACTIVATIONS[func.attr], False
    if isinstance(func, ast.Attribute) and func.attr in ("squeeze", "view", "reshape", "float"):
        return activation(a, scope, func.value, line, depth + 1)
    kind = scope.kind(text(func), allow_guess=False)
    if kind is None or kind.kind != MODULE:
        return "", False
    if kind.detail in _ACTIVATIONS:
        return _ACTIVATIONS[kind.detail], False
    return _model_output(a, kind.detail, kind.value), True


def _model_output(a: Analysis, detail: str, value: ast.expr | None) -> str:
    if detail == "Sequential" and isinstance(value, ast.Call) and value.args:
        last = value.args[-1]
        if isinstance(last, ast.Call):
            return _ACTIVATIONS.get((a.src.qualname(last.func) or "").rsplit(".", 1)[-1], "")
        return ""
    cls = a.src.classes.get(detail)
    if cls is None:
        return ""
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "forward":
            scope = function_scope(a.src, item, a.cls_scopes[detail])
            for node in own_nodes(item.body):
                if isinstance(node, ast.Return) and node.value is not None:
                    act, _ = activation(a, scope, node.value, node.lineno, 0)
                    if act:
                        return act
    return ""
