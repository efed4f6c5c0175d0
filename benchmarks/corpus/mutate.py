"""Bug classes of gradwatch's catalogue as source mutations of a program's own training loop.

Pure AST: :func:`apply` parses a program's source, finds its training loop (the statement
that calls ``.backward(``, the optimizer's ``.step()`` after it, its ``.zero_grad()``
calls), applies one bug class and returns the mutated source, or ``None`` when the class
does not apply to this program (no scheduler to misplace, no ``nn.ModuleList`` to flatten,
no named loss to cut). A mutant always compiles; its behaviour is the bug and nothing else.

Each :class:`Mutation` names the check ids of ``docs/checks.md`` that name its bug
(``expected``) and whether it edits the training loop (``scope="loop"``: the script that
calls ``backward``) or the model's definition (``scope="model"``: also tried on the local
modules the script imports).

State a mutation needs across steps (a step counter, the first batch) lives in one
module-level dict, ``_gw_state``, inserted after the module's docstring and ``__future__``
imports, so it works the same in a module-level loop, a ``train()`` function called per
epoch or a trainer class.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Literal

STATE = "_gw_state"
#: the optimizer step at which the step-triggered mutations (NaN, lr jump) fire
AT_STEP = 50

OPTIMIZERS = frozenset(
    [
        "SGD",
        "Adam",
        "AdamW",
        "RMSprop",
        "Adagrad",
        "Adadelta",
        "NAdam",
        "RAdam",
        "Adamax",
        "LBFGS",
        "ASGD",
        "Rprop",
        "SparseAdam",
        "Adafactor",
    ]
)
LOSS_ELEMENTWISE = frozenset(["MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss"])
LOSS_ELEMENTWISE_FN = frozenset(["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"])
#: layer types without parameters: cutting the graph after one of them cuts nothing new
PARAMETERLESS = frozenset(
    [
        "ReLU",
        "ReLU6",
        "GELU",
        "Tanh",
        "Sigmoid",
        "SiLU",
        "Mish",
        "ELU",
        "SELU",
        "LeakyReLU",
        "Softmax",
        "LogSoftmax",
        "Softplus",
        "Dropout",
        "Dropout1d",
        "Dropout2d",
        "Dropout3d",
        "AlphaDropout",
        "MaxPool1d",
        "MaxPool2d",
        "MaxPool3d",
        "AvgPool1d",
        "AvgPool2d",
        "AvgPool3d",
        "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d",
        "AdaptiveMaxPool1d",
        "AdaptiveMaxPool2d",
        "Flatten",
        "Unflatten",
        "Identity",
        "Upsample",
        "PixelShuffle",
        "ZeroPad2d",
    ]
)
#: the parameter that holds the batch in a per-batch step function
BATCH_ARGS = ("batch", "data", "inputs", "sample", "samples")
CONSTANT_TENSORS = frozenset(
    {"ones", "zeros", "full", "ones_like", "zeros_like", "full_like", "fill_"}
)
CLIPS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"})


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    expected: tuple[str, ...]  # check ids that name this bug
    description: str
    edit: Callable[[ast.Module, int], bool]  # mutates the tree in place; False: not applicable
    scope: Literal["loop", "model"] = "loop"
    #: the program must contain one of these texts for the bug to change its behaviour
    #: (eval() on a model without dropout or batch norm changes nothing)
    needs_text: tuple[str, ...] = ()
    #: a replicate case (:mod:`mutate_structure`): the edit is active only where
    #: ``GW_MUTANT=1``; the injector runs two replicates without it first, in one data dir
    replicate: bool = False
    #: the lowest severity of an expected check's finding that catches it (``info`` for a
    #: structure change that is an event, not a warning, by design)
    severity: str = "warning"


# ---------------------------------------------------------------- locating statements


@dataclasses.dataclass
class Site:
    stmt: ast.stmt
    block: list[ast.stmt]
    ancestors: tuple[ast.AST, ...]  # enclosing statements (and handlers), outermost first

    @property
    def scope(self) -> ast.AST | None:
        """The innermost enclosing function (None: module level)."""
        for node in reversed(self.ancestors):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    @property
    def loops(self) -> list[ast.For | ast.While]:
        """Enclosing loops within the scope, outermost first."""
        out: list[ast.For | ast.While] = []
        for node in self.ancestors:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out = []
            elif isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
                out.append(node)  # type: ignore[arg-type]
        return out


def sites(tree: ast.AST, ancestors: tuple[ast.AST, ...] = ()) -> Iterator[Site]:
    """Every statement with the list that holds it, in source order."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(tree, field, None)
        if not isinstance(block, list):
            continue
        for stmt in list(block):
            if not isinstance(stmt, ast.stmt):
                continue
            yield Site(stmt, block, ancestors)
            yield from sites(stmt, (*ancestors, stmt))
    for handler in getattr(tree, "handlers", []) or []:
        yield from sites(handler, (*ancestors, handler))
    for case in getattr(tree, "cases", []) or []:
        yield from sites(case, (*ancestors, case))


def text(node: ast.AST) -> str:
    return ast.unparse(node)


def call_attr(node: ast.AST | None, attr: str) -> ast.Call | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attr
    ):
        return node
    return None


def expr_call(stmt: ast.stmt, attr: str) -> ast.Call | None:
    """``stmt`` is ``<x>.<attr>(...)`` as a statement (or assigned: ``n = clip_grad_norm_``)."""
    value = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) else None
    return call_attr(value, attr)


def func_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def receiver(call: ast.Call) -> str:
    assert isinstance(call.func, ast.Attribute)
    return text(call.func.value)


def is_scheduler(name: str) -> bool:
    low = name.lower()
    return "sched" in low or low.endswith("lr_scheduler")


def is_optimizer_name(name: str, known: set[str]) -> bool:
    low = name.lower()
    return name in known or "optim" in low or low.split(".")[-1].startswith("opt")


def parse_stmt(src: str) -> list[ast.stmt]:
    return ast.parse(src).body


def parse_expr(src: str) -> ast.expr:
    node = ast.parse(src, mode="eval").body
    return node


def same_scope(a: Site, b: Site) -> bool:
    return a.scope is b.scope


def contains(outer: ast.AST, inner: ast.AST) -> bool:
    return any(n is inner for n in ast.walk(outer))


class Loop:
    """The training loop of one module: backward statements, the optimizer steps after them,
    the zero_grad calls, the optimizers' names."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        all_sites = list(sites(tree))
        self.sites = all_sites
        self.optimizers: set[str] = set()
        self.ctors: list[ast.Call] = []  # optimizer constructor calls
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and func_name(node) in OPTIMIZERS:
                self.ctors.append(node)
        for s in all_sites:
            value = s.stmt.value if isinstance(s.stmt, ast.Assign) else None
            if isinstance(value, ast.Call) and (
                func_name(value) in OPTIMIZERS or "optimizer" in func_name(value)
            ):
                assert isinstance(s.stmt, ast.Assign)
                self.optimizers.update(text(t) for t in s.stmt.targets)
        self.zero_grads = [s for s in all_sites if isinstance(s.stmt, ast.Expr)
                           and call_attr(s.stmt.value, "zero_grad")]  # fmt: skip
        for s in self.zero_grads:
            call = call_attr(s.stmt.value, "zero_grad")  # type: ignore[attr-defined]
            assert call is not None
            if is_optimizer_name(receiver(call), self.optimizers):
                self.optimizers.add(receiver(call))
        self.backwards = [s for s in all_sites if isinstance(s.stmt, ast.Expr)
                          and call_attr(s.stmt.value, "backward")]  # fmt: skip
        self.steps = [s for s in all_sites if self.step_optimizer(s) is not None]

    def step_optimizer(self, s: Site) -> str | None:
        """The optimizer a statement steps (``opt.step()``, ``scaler.step(opt)``), or None."""
        call = expr_call(s.stmt, "step") if isinstance(s.stmt, ast.Expr) else None
        if call is None:
            return None
        name = receiver(call)
        if is_scheduler(name):
            return None
        if is_optimizer_name(name, self.optimizers):
            return name
        if call.args and is_optimizer_name(text(call.args[0]), self.optimizers):
            return text(call.args[0])  # scaler.step(optimizer)
        return None

    def step_after(self, b: Site) -> Site | None:
        """The optimizer step that applies backward ``b``: the first after it in its scope."""
        line = b.stmt.lineno
        after = [s for s in self.steps if same_scope(s, b) and s.stmt.lineno > line]
        if after:
            return after[0]
        before = [s for s in self.steps if same_scope(s, b)]
        return before[0] if before else None

    def first(self) -> tuple[Site, Site] | None:
        """The first backward with an optimizer step in its scope, and that step."""
        for b in self.backwards:
            p = self.step_after(b)
            if p is not None:
                return b, p
        return None


def loss_name(b: Site) -> str | None:
    """The loss a backward statement differentiates, when it is a plain name."""
    call = call_attr(b.stmt.value, "backward")  # type: ignore[attr-defined]
    assert call is not None
    expr = call.func.value  # type: ignore[attr-defined]
    if call.args and isinstance(call.args[0], ast.Name):  # accelerator.backward(loss)
        expr = call.args[0]
    if isinstance(expr, ast.Call) and func_name(expr) == "scale" and expr.args:
        expr = expr.args[0]  # scaler.scale(loss).backward()
    return expr.id if isinstance(expr, ast.Name) else None


def insert_before(anchor: Site, stmts: list[ast.stmt]) -> None:
    i = next(i for i, s in enumerate(anchor.block) if s is anchor.stmt)
    anchor.block[i:i] = stmts


def insert_after(anchor: Site, stmts: list[ast.stmt]) -> None:
    i = next(i for i, s in enumerate(anchor.block) if s is anchor.stmt)
    anchor.block[i + 1 : i + 1] = stmts


def remove(s: Site) -> None:
    i = next(i for i, x in enumerate(s.block) if x is s.stmt)
    del s.block[i]
    if not s.block:
        s.block.append(ast.Pass())


def torch_name(tree: ast.Module) -> str:
    """How the module can name torch: ``torch`` when it imports it at the top, else an
    expression that needs no import."""
    for node in tree.body:
        if isinstance(node, ast.Import) and any(
            a.name == "torch" and a.asname is None for a in node.names
        ):
            return "torch"
    return "__import__('torch')"


def add_state(tree: ast.Module, src: str | None = None) -> None:
    """``_gw_state = {}`` (or ``src``) after the docstring and the ``__future__`` imports."""
    if src is None:
        if any(isinstance(n, ast.Assign) and text(n.targets[0]) == STATE for n in tree.body):
            return
        src = f"{STATE} = {{}}"
    i = 0
    while i < len(tree.body):
        node = tree.body[i]
        doc = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and i == 0
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (doc or future):
            break
        i += 1
    tree.body[i:i] = parse_stmt(src)


def counter(key: str) -> list[ast.stmt]:
    return parse_stmt(f"{STATE}[{key!r}] = {STATE}.get({key!r}, 0) + 1")


# ---------------------------------------------------------------- the mutations


def drop_zero_grad(tree: ast.Module, at: int) -> bool:
    loop = Loop(tree)
    if loop.first() is None or not loop.zero_grads:
        return False
    for s in loop.zero_grads:
        remove(s)
    return True


def _pair(loop: Loop, z: Site) -> Site | None:
    """The optimizer step a zero_grad call prepares: the same optimizer's step in its scope,
    else the step after the next backward."""
    call = call_attr(z.stmt.value, "zero_grad")  # type: ignore[attr-defined]
    assert call is not None
    name = receiver(call)
    for p in loop.steps:
        if same_scope(p, z) and loop.step_optimizer(p) == name:
            return p
    for b in loop.backwards:
        if same_scope(b, z) and b.stmt.lineno > z.stmt.lineno:
            return loop.step_after(b)
    for b in loop.backwards:
        if same_scope(b, z):
            return loop.step_after(b)
    return None


def move_zero_grad(tree: ast.Module, at: int) -> bool:
    """zero_grad() moved between backward() and step(): right before the step."""
    loop = Loop(tree)
    pairs = [(z, _pair(loop, z)) for z in loop.zero_grads]
    pairs = [(z, p) for z, p in pairs if p is not None]
    if not pairs:
        return False
    done: set[int] = set()
    for z, p in pairs:
        assert p is not None
        remove(z)
        if id(p.stmt) not in done:
            insert_before(p, [copy.deepcopy(z.stmt)])
            done.add(id(p.stmt))
    return True


def zero_grad_every_microbatch(tree: ast.Module, at: int) -> bool:
    """Gradient accumulation whose zero_grad() runs before every micro-batch's backward."""
    loop = Loop(tree)
    found = loop.first()
    if found is None or not loop.zero_grads:
        return False
    b, p = found
    accumulating = (b.loops and not contains(b.loops[-1], p.stmt)) or any(
        isinstance(a, ast.If) and not contains(a, b.stmt) for a in p.ancestors
    )
    if not accumulating:
        return False
    zs = [z for z in loop.zero_grads if same_scope(z, b)]
    if not zs:
        return False
    for z in zs:
        remove(z)
    insert_before(b, [copy.deepcopy(zs[0].stmt)])
    return True


def step_twice(tree: ast.Module, at: int) -> bool:
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    _, p = found
    call = expr_call(p.stmt, "step")
    assert call is not None
    if call.args and not is_optimizer_name(receiver(call), loop.optimizers):
        return False  # scaler.step twice raises at once: not a silent bug
    insert_after(p, [copy.deepcopy(p.stmt)])
    return True


def clip_before_backward(tree: ast.Module, at: int) -> bool:
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, p = found
    clips = [
        s
        for s in loop.sites
        if isinstance(s.stmt, (ast.Expr, ast.Assign))
        and isinstance(s.stmt.value, ast.Call)
        and func_name(s.stmt.value) in CLIPS
        and same_scope(s, b)
        and s.stmt.lineno > b.stmt.lineno
    ]
    if clips:
        remove(clips[0])
        insert_before(b, [clips[0].stmt])
        return True
    opt = loop.step_optimizer(p)
    torch = torch_name(tree)
    insert_before(
        b,
        parse_stmt(
            f"{torch}.nn.utils.clip_grad_norm_("
            f"[q for g in {opt}.param_groups for q in g['params']], 1.0)"
        ),
    )
    return True


def detach_loss(tree: ast.Module, at: int) -> bool:
    """The loss rebuilt from its value: ``loss = torch.tensor(loss.item(), requires_grad=True)``."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    name = loss_name(b)
    if name is None:
        return False
    torch = torch_name(tree)
    insert_before(b, parse_stmt(f"{name} = {torch}.tensor({name}.item(), requires_grad=True)"))
    return True


def _layers(cls: ast.ClassDef) -> dict[str, str]:
    """``self.<name> = <Type>(...)`` in a class's methods: name -> type name."""
    out: dict[str, str] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and text(t.value) == "self":
                    out[t.attr] = func_name(node.value)
    return out


def _self_layer(node: ast.AST, layers: dict[str, str]) -> bool:
    """``node`` calls a layer of ``self`` that may hold parameters."""
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
            chain = call.func
            while isinstance(chain.value, ast.Attribute):
                chain = chain.value
            if isinstance(chain.value, ast.Name) and chain.value.id == "self":
                first = chain.attr
                if call.func.attr in ("view", "reshape", "size", "permute", "transpose"):
                    continue
                if first in layers and layers[first] not in PARAMETERLESS:
                    return True  # a layer built in __init__ (not a method: self.encode(x))
    return False


def _model_forward(
    tree: ast.Module, *, tensor_target: bool = False
) -> tuple[ast.FunctionDef, list[ast.stmt], int] | None:
    """The model's forward (of a class no other class of the module instantiates, the last
    defined), and the index of the first statement that assigns the output of a layer that
    may hold parameters and is followed by another layer call (with ``tensor_target``: one
    not unpacked into several names, an LSTM's ``out, state``, as ``.detach()`` needs)."""
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    names = {c.name for c in classes}
    inner: set[str] = set()
    for c in classes:
        for node in ast.walk(c):
            fn = node.func if isinstance(node, ast.Call) else None
            if isinstance(fn, ast.Name) and fn.id in names and fn.id != c.name:
                inner.add(node.func.id)
    outer = [c for c in classes if c.name not in inner]
    for cls in [*reversed(outer), *reversed([c for c in classes if c.name in inner])]:
        pick = _cut_point(cls, tensor_target)
        if pick is not None:
            return pick
    return None


def _cut_point(
    cls: ast.ClassDef, tensor_target: bool
) -> tuple[ast.FunctionDef, list[ast.stmt], int] | None:
    fwd = next(
        (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None
    )
    if fwd is None:
        return None
    layers = _layers(cls)
    body = fwd.body
    assigns = [
        i
        for i, s in enumerate(body)
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and s.value is not None
        and _self_layer(s.value, layers)
        and not (
            tensor_target
            and isinstance(s, ast.Assign)
            and any(isinstance(t, (ast.Tuple, ast.List)) for t in s.targets)
        )
    ]
    for i in assigns:
        if any(_self_layer(s, layers) for s in body[i + 1 :]):
            return fwd, body, i
    return None


def detach_intermediate(tree: ast.Module, at: int) -> bool:
    """The output of the model's first parameterised layer wrapped in ``.detach()``."""
    pick = _model_forward(tree, tensor_target=True)
    if pick is None:
        return False
    _, body, i = pick
    stmt = body[i]
    assert isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and stmt.value
    stmt.value = ast.Call(
        func=ast.Attribute(value=stmt.value, attr="detach", ctx=ast.Load()), args=[], keywords=[]
    )
    return True


def no_grad_forward(tree: ast.Module, at: int) -> bool:
    """The model's first parameterised layer run under ``torch.no_grad()``."""
    pick = _model_forward(tree)
    if pick is None:
        return False
    _, body, i = pick
    (with_,) = parse_stmt(f"with {torch_name(tree)}.no_grad():\n    pass")
    assert isinstance(with_, ast.With)
    with_.body = [body[i]]
    body[i] = with_
    return True


def plain_list(tree: ast.Module, at: int) -> bool:
    """``self.x = nn.ModuleList(...)`` in a model's ``__init__`` replaced by ``list(...)`` (not
    one inside another container, which would reject a list at once; not a ModuleDict,
    whose items are read as attributes)."""
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
                continue
            for s in sites(fn):
                if not isinstance(s.stmt, ast.Assign) or not isinstance(s.stmt.value, ast.Call):
                    continue
                call = s.stmt.value
                if func_name(call) == "ModuleList":
                    call.func = ast.Name(id="list")
                    return True
    return False


#: the parameters of a model without its last child that has any (a head after which only
#: parameterless layers such as Sigmoid follow); a model whose one such child holds all its
#: parameters: that child's, likewise; a model with parameters of its own and at most one such
#: child: all but its last own parameter
WITHOUT_HEAD = """
def _gw_without_head(model):
    kids = [c for c in model.children() if any(True for _ in c.parameters())]
    own = list(model.parameters(recurse=False))
    if len(kids) == 1 and not own:
        return _gw_without_head(kids[0])
    if len(kids) >= 2:
        left = {id(q) for q in kids[-1].parameters()}
    else:
        left = {id(own[-1])} if len(own) + len(kids) >= 2 else set()
    return [q for q in model.parameters() if id(q) not in left]
"""


def optimizer_missing_module(tree: ast.Module, at: int) -> bool:
    """The first optimizer built without the model's last child module that has parameters
    (the head), or without its last param group. A module whose only child with parameters
    is a wrapper is looked into; a module with parameters of its own (an ``nn.Linear``
    subclass whose only child is an activation) is built without its last own parameter."""
    loop = Loop(tree)
    for ctor in loop.ctors:
        params = ctor.args[0] if ctor.args else None
        if params is None:
            kw = next((k for k in ctor.keywords if k.arg == "params"), None)
            params = kw.value if kw else None
        if params is None:
            continue
        if isinstance(params, ast.List) and len(params.elts) >= 2:
            params.elts.pop()
            return True
        call = call_attr(params, "parameters")
        if call is not None and not call.args:
            new = parse_expr(f"_gw_without_head({receiver(call)})")
            if ctor.args:
                ctor.args[0] = new
            else:
                next(k for k in ctor.keywords if k.arg == "params").value = new
            add_state(tree, WITHOUT_HEAD)
            return True
    return False


def _scale_lr(tree: ast.Module, factor: str) -> bool:
    """Every optimizer's learning rate times ``factor``: in its constructor when the program
    never sets a group's lr by hand, else around the step (``g['lr']`` scaled, step, back)."""
    loop = Loop(tree)
    found = loop.first()
    by_hand = any(
        isinstance(n, (ast.Assign, ast.AugAssign))
        and any(
            isinstance(t, ast.Subscript) and text(t.slice) in ("'lr'", '"lr"')
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        )
        for n in ast.walk(tree)
    )
    changed = False
    if not by_hand:
        for ctor in loop.ctors:
            kw = next((k for k in ctor.keywords if k.arg == "lr"), None)
            if kw is not None:
                kw.value = parse_expr(f"({text(kw.value)}) * {factor}")
                changed = True
            elif len(ctor.args) >= 2:
                ctor.args[1] = parse_expr(f"({text(ctor.args[1])}) * {factor}")
                changed = True
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for k in node.keywords:
                    if k.arg == "max_lr":
                        k.value = parse_expr(f"({text(k.value)}) * {factor}")
    if changed:
        return True
    if found is None or factor == "0":
        return False  # lr 0 around the step only: indistinguishable from skipping it
    _, p = found
    opt = loop.step_optimizer(p)
    insert_before(p, parse_stmt(f"for _gw_g in {opt}.param_groups:\n    _gw_g['lr'] *= {factor}"))
    undo = f"for _gw_g in {opt}.param_groups:\n    _gw_g['lr'] = _gw_g['lr'] / {factor}"
    insert_after(p, parse_stmt(undo))
    return True


def lr_x1000(tree: ast.Module, at: int) -> bool:
    return _scale_lr(tree, "1000")


def lr_zero(tree: ast.Module, at: int) -> bool:
    return _scale_lr(tree, "0")


def lr_jump(tree: ast.Module, at: int) -> bool:
    """From step ``at`` on, every learning rate 1,000 times larger (around each step, so a
    scheduler or a hand-set schedule keeps its own values)."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    _, p = found
    opt = loop.step_optimizer(p)
    add_state(tree)
    before = (
        f"{STATE}['lr_step'] = {STATE}.get('lr_step', 0) + 1\n"
        f"if {STATE}['lr_step'] >= {at}:\n"
        f"    for _gw_g in {opt}.param_groups:\n        _gw_g['lr'] *= 1000"
    )
    after = (
        f"if {STATE}['lr_step'] >= {at}:\n"
        f"    for _gw_g in {opt}.param_groups:\n        _gw_g['lr'] = _gw_g['lr'] / 1000"
    )
    insert_before(p, parse_stmt(before))
    # find p again: the inserted statements shifted nothing p's identity depends on
    insert_after(p, parse_stmt(after))
    return True


def scheduler_per_batch(tree: ast.Module, at: int) -> bool:
    """A per-epoch ``scheduler.step()`` moved into the batch loop, right after the optimizer
    step. When the batch loop is another function's (``train()`` called per epoch by
    ``main()``, which owns the scheduler), the scheduler is handed over through
    ``_gw_state`` right after it is built."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    _, p = found
    if not p.loops:
        return False
    inner = p.loops[-1]
    for s in loop.sites:
        call = expr_call(s.stmt, "step") if isinstance(s.stmt, ast.Expr) else None
        if call is None or call.args or call.keywords or not is_scheduler(receiver(call)):
            continue
        if contains(inner, s.stmt) or not s.loops:
            continue  # already per batch, or not in a loop at all
        if same_scope(s, p):
            remove(s)
            insert_after(p, [s.stmt])
            return True
        name = receiver(call)
        built = [
            a
            for a in loop.sites
            if isinstance(a.stmt, ast.Assign)
            and same_scope(a, s)
            and any(text(t) == name for t in a.stmt.targets)
            and a.stmt.lineno < s.stmt.lineno
        ]
        if not built:
            continue
        add_state(tree)
        insert_after(built[-1], parse_stmt(f"{STATE}['scheduler'] = {name}"))
        remove(s)
        step = f"if 'scheduler' in {STATE}:\n    {STATE}['scheduler'].step()"
        insert_after(p, parse_stmt(step))
        return True
    return False


def eval_mode(tree: ast.Module, at: int) -> bool:
    """``model.train()`` replaced by ``model.eval()``; with no ``train()`` call,
    ``model.eval()`` before the training loop."""
    changed = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr):
            call = call_attr(node.value, "train")
            if call is None or call.args or call.keywords:
                continue
            if "trainer" not in receiver(call).lower():
                assert isinstance(call.func, ast.Attribute)
                call.func.attr = "eval"
                changed = True
    if changed:
        return True
    loop = Loop(tree)
    found = loop.first()
    if found is None or not found[0].loops:
        return False
    b, _ = found
    model = None
    for ctor in loop.ctors:
        first = ctor.args[0] if ctor.args else None
        call = call_attr(first, "parameters")
        if call is not None:
            model = receiver(call)
            break
    if model is None:
        return False
    outer = b.loops[0]
    where = next(s for s in loop.sites if s.stmt is outer)
    insert_before(where, parse_stmt(f"{model}.eval()"))
    return True


def _batch_assigns(loop: Loop, b: Site) -> list[Site]:
    """Batch fetches in the loops around ``b``: ``x, y = get_batch(...)`` / ``next(it)``."""
    if not b.loops:
        return []
    outer = b.loops[0]
    out = []
    for s in loop.sites:
        if not (isinstance(s.stmt, ast.Assign) and isinstance(s.stmt.value, ast.Call)):
            continue
        name = func_name(s.stmt.value).lower()
        if ("batch" in name or name == "next") and contains(outer, s.stmt):
            out.append(s)
    return out


def _is_range(it: ast.expr) -> bool:
    if isinstance(it, ast.Call) and func_name(it) in ("enumerate", "tqdm") and it.args:
        return _is_range(it.args[0])
    return isinstance(it, ast.Call) and func_name(it) in ("range", "trange")


def reuse_batch(tree: ast.Module, at: int) -> bool:
    """The first batch fetched once and used at every step."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    fetches = _batch_assigns(loop, b)
    if fetches:
        add_state(tree)
        for s in fetches:
            assert isinstance(s.stmt, ast.Assign)
            target = s.stmt.targets[0]
            load = text(target)
            insert_after(s, parse_stmt(f"{load} = {STATE}.setdefault('batch', ({load}))"))
        return True
    data_loops = [lp for lp in b.loops if isinstance(lp, ast.For) and not _is_range(lp.iter)]
    scope = b.scope
    if not data_loops and isinstance(scope, ast.FunctionDef):
        # a step function the loop calls per batch: training_step(self, batch, batch_idx)
        arg = next((a.arg for a in scope.args.args if a.arg in BATCH_ARGS), None)
        if arg is None:
            return False
        add_state(tree)
        at_ = 1 if ast.get_docstring(scope) is not None else 0
        scope.body[at_:at_] = parse_stmt(f"{arg} = {STATE}.setdefault('batch', {arg})")
        return True
    if not data_loops:
        return False
    # the outermost: inner loops over a batch split it up or walk models (for net, opt in
    # zip(nets, optimizers)), they do not fetch it
    lp = data_loops[0]
    assert isinstance(lp, ast.For)
    target = lp.target
    if (
        isinstance(lp.iter, ast.Call)
        and func_name(lp.iter) == "enumerate"
        and isinstance(target, ast.Tuple)
        and len(target.elts) == 2
    ):
        target = target.elts[1]
    add_state(tree)
    load = text(target)
    lp.body[0:0] = parse_stmt(f"{load} = {STATE}.setdefault('batch', ({load}))")
    return True


def _made_here(loop: Loop, y: str) -> bool:
    """``y`` is assigned a tensor the program makes itself (a GAN's ones/zeros targets)."""
    return any(
        isinstance(s.stmt, ast.Assign)
        and any(text(t) == y for t in s.stmt.targets)
        and any(
            isinstance(n, ast.Call) and func_name(n) in CONSTANT_TENSORS
            for n in ast.walk(s.stmt.value)
        )
        for s in loop.sites
    )


def _loss_call(loop: Loop, b: Site, name: str) -> tuple[Site, ast.expr] | None:
    """The statement that computes loss ``name`` from a call with a second argument that is
    data (the labels: ``criterion(out, y)``, ``model(x, y)``), and that argument."""
    before = [s for s in loop.sites if same_scope(s, b) and s.stmt.lineno <= b.stmt.lineno]
    for s in reversed(before):
        if not isinstance(s.stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            continue
        targets = s.stmt.targets if isinstance(s.stmt, ast.Assign) else [s.stmt.target]
        names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if name not in names or s.stmt.value is None:
            continue
        for call in ast.walk(s.stmt.value):
            if isinstance(call, ast.Call) and len(call.args) >= 2:
                label = call.args[1]
                if (
                    isinstance(label, (ast.Name, ast.Attribute, ast.Subscript))
                    and name not in {n.id for n in ast.walk(label) if isinstance(n, ast.Name)}
                    and not _made_here(loop, text(label))
                ):
                    return s, label
    return None


def shuffle_labels(tree: ast.Module, at: int) -> bool:
    """Labels permuted apart from their inputs: ``y = y[torch.randperm(len(y))]``."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    name = loss_name(b)
    if name is None:
        return False
    hit = _loss_call(loop, b, name)
    if hit is None:
        return False
    s, label = hit
    y = text(label)
    torch = torch_name(tree)
    insert_before(s, parse_stmt(f"{y} = {y}[{torch}.randperm({y}.shape[0], device={y}.device)]"))
    return True


def nan_at_step(tree: ast.Module, at: int) -> bool:
    """At backward ``at``, ``loss = loss + torch.log(loss - loss)`` (log of zero)."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    name = loss_name(b)
    if name is None:
        return False
    add_state(tree)
    torch = torch_name(tree)
    src = (
        f"{STATE}['nan_step'] = {STATE}.get('nan_step', 0) + 1\n"
        f"if {STATE}['nan_step'] == {at}:\n"
        f"    {name} = {name} + {torch}.log({name} - {name})"
    )
    insert_before(b, parse_stmt(src))
    return True


def shape_broadcast(tree: ast.Module, at: int) -> bool:
    """An element-wise loss given ``output.unsqueeze(1)``: ``(N, 1)`` against ``(N,)``."""
    criteria = set()
    for node in ast.walk(tree):
        value = node.value if isinstance(node, ast.Assign) else None
        if isinstance(value, ast.Call) and func_name(value) in LOSS_ELEMENTWISE:
            assert isinstance(node, ast.Assign)
            criteria.update(text(t) for t in node.targets)
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    scope = b.scope or tree
    for node in ast.walk(scope):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        if text(node.func) in criteria or func_name(node) in LOSS_ELEMENTWISE_FN:
            node.args[0] = parse_expr(f"({text(node.args[0])}).unsqueeze(1)")
            return True
    return False


MUTATIONS: dict[str, Mutation] = {
    m.name: m
    for m in (
        Mutation(
            "drop-zero-grad",
            ("stale-grad",),
            "every zero_grad() call removed",
            drop_zero_grad,
        ),
        Mutation(
            "zero-grad-before-step",
            ("grad-zeroed-before-step",),
            "zero_grad() moved between backward() and step()",
            move_zero_grad,
        ),
        Mutation(
            "zero-grad-every-microbatch",
            ("accumulation-wiped",),
            "gradient accumulation with zero_grad() before every micro-batch's backward()",
            zero_grad_every_microbatch,
        ),
        Mutation(
            "step-twice",
            ("step-without-backward",),
            "the optimizer's step() called twice per backward()",
            step_twice,
        ),
        Mutation(
            "clip-before-backward",
            ("clip-before-backward",),
            "clip_grad_norm_ moved (or inserted) before backward()",
            clip_before_backward,
        ),
        Mutation(
            "detach-loss",
            ("param-no-grad",),
            "loss = torch.tensor(loss.item(), requires_grad=True) before backward()",
            detach_loss,
        ),
        Mutation(
            "detach-intermediate",
            ("param-no-grad",),
            "the first parameterised layer's output in the model's forward() detached",
            detach_intermediate,
            scope="model",
        ),
        Mutation(
            "no-grad-forward",
            ("param-no-grad",),
            "the first parameterised layer of the model's forward() under torch.no_grad()",
            no_grad_forward,
            scope="model",
        ),
        Mutation(
            "plain-list",
            ("param-not-in-optimizer",),
            "nn.ModuleList in a model's __init__ replaced by list",
            plain_list,
            scope="model",
        ),
        Mutation(
            "optimizer-missing-module",
            ("param-not-in-optimizer",),
            "the optimizer built without the model's last child module (or last param group)",
            optimizer_missing_module,
        ),
        Mutation(
            "lr-x1000",
            ("lr-too-large", "update-ratio"),
            "every learning rate multiplied by 1,000",
            lr_x1000,
        ),
        Mutation(
            "lr-zero",
            ("param-not-updated", "lr-collapse"),
            "every learning rate set to 0",
            lr_zero,
        ),
        Mutation(
            "lr-jump",
            ("lr-jump", "lr-too-large"),
            f"every learning rate multiplied by 1,000 from step {AT_STEP} on",
            lr_jump,
        ),
        Mutation(
            "scheduler-per-batch",
            ("lr-collapse",),
            "a per-epoch scheduler.step() moved into the batch loop",
            scheduler_per_batch,
        ),
        Mutation(
            "eval-mode",
            ("eval-mode-training",),
            "model.train() replaced by model.eval() (or model.eval() before the loop)",
            eval_mode,
            needs_text=("Dropout", "dropout", "BatchNorm", "batch_norm"),
        ),
        Mutation(
            "reuse-batch",
            ("repeated-batch",),
            "the first batch fetched once and reused at every step",
            reuse_batch,
        ),
        Mutation(
            "shuffle-labels",
            ("loss-at-chance",),
            "labels permuted apart from their inputs every step",
            shuffle_labels,
        ),
        Mutation(
            "nan-at-step",
            ("nonfinite-loss", "nonfinite-grad"),
            f"loss + torch.log(loss - loss) at backward {AT_STEP}",
            nan_at_step,
        ),
        Mutation(
            "shape-broadcast",
            ("loss-shape-mismatch",),
            "an element-wise loss given output.unsqueeze(1): (N,1) against (N,)",
            shape_broadcast,
        ),
    )
}


def apply(source: str, bug_class: str, *, at_step: int = AT_STEP) -> str | None:
    """``source`` with ``bug_class`` applied, or None when the class does not apply."""
    mutation = MUTATIONS[bug_class]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not mutation.edit(tree, at_step):
        return None
    ast.fix_missing_locations(tree)
    out = ast.unparse(tree)
    compile(out, "<mutant>", "exec")
    return out + "\n"


# the structure changes mid-run of issue #41 live in their own module, which adds them to
# MUTATIONS (imported last: it uses this module's helpers)
import mutate_structure  # noqa: E402, F401
