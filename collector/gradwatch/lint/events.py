"""Gradient and mode events of a block of code, in source order.

A loop body becomes a list of :class:`Event` — backward, step, zero_grad, eval/train,
manual updates, unresolved calls — each with the ``if`` tests around it, its loop depth
below the analysed loop and the branch it sits in. Calls to functions of the same file
(and to ``self`` methods of the same class) are followed one level deep, their
parameters renamed to the caller's arguments, so ``train_one_epoch(model, opt)`` and a
``reset_grad()`` helper count where they are called.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gradwatch.lint.facts import (
    BACKWARD,
    CALL,
    CLIP,
    EVAL,
    SCHED_STEP,
    STEP,
    TRAIN,
    UPDATE,
    ZERO,
    Event,
    Guard,
    is_accum_guard,
    is_data_loop,
)
from gradwatch.lint.kinds import (
    ACCELERATOR,
    ENGINE,
    OPTIMIZER,
    SCALER,
    SCHEDULER,
    Kind,
    Scope,
    function_scope,
)
from gradwatch.lint.source import Source, text

_BACKWARD_CALLERS = re.compile(r"accelerator|fabric", re.IGNORECASE)
_BUILTINS = set(dir(builtins))
#: Libraries whose functions never zero, step or switch a user's model.
_KNOWN_LIBRARIES = {
    "torch", "torchvision", "numpy", "math", "random", "time", "os", "sys", "json",
    "logging", "tqdm", "itertools", "functools", "collections", "wandb", "pathlib",
}  # fmt: skip
_INPLACE_UPDATES = {"add_", "sub_", "copy_", "mul_", "addcdiv_", "addcmul_"}
#: gradient clipping: torch's functions and the methods of Accelerate, Fabric and Lightning
_CLIPS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_gradients"}
#: in-place methods that clear a gradient when their one argument is the constant 0
_ZEROING = {"fill_", "mul_"}


def _zero_arg(c: ast.Call) -> bool:
    """``c`` has one argument, the constant zero (``fill_(0)``, ``mul_(0.0)``)."""
    if len(c.args) != 1 or c.keywords:
        return False
    arg = c.args[0]
    return isinstance(arg, ast.Constant) and not isinstance(arg.value, bool) and arg.value == 0


Lookup = Callable[[str], Kind | None]
Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Ctx:
    """Where the walk is: loop depth, guards, flags, and how names resolve."""

    lookup: Lookup
    depth: int = 0
    guards: tuple[Guard, ...] = ()
    branches: tuple[tuple[int, int], ...] = ()
    closure: bool = False
    managed: bool = False
    no_grad: bool = False
    via: str | None = None
    subst: dict[str, str | None] = field(default_factory=dict)
    loopvars: dict[str, str | None] = field(default_factory=dict)
    inline: bool = True
    loops: tuple[int, ...] = ()
    data_loop: bool = False
    items: dict[str, str] = field(default_factory=dict)  # loop variable -> its collection

    def name_of(self, dotted: str | None) -> str | None:
        """A dotted name as the analysed code's caller names it (helper parameters
        renamed; None for a parameter the caller passed no name for)."""
        if dotted is None:
            return None
        root, dot, rest = dotted.partition(".")
        if root in self.subst:
            mapped = self.subst[root]
            return None if mapped is None else mapped + dot + rest
        return dotted

    def name(self, node: ast.AST | None) -> str | None:
        """The expression's dotted name, helper parameters renamed to the caller's."""
        return self.name_of(text(node))


class EventCollector:
    """Builds the event list of a block of code in one file."""

    def __init__(self, src: Source, module: Scope, cls_scopes: dict[str, Scope]) -> None:
        self.src = src
        self.module = module
        self.cls_scopes = cls_scopes
        self._scopes: dict[int, Scope] = {}
        self._local: dict[str, Function] = {}  # nested functions, inlined where called
        self._active: set[int] = set()  # nested functions being inlined (no recursion)

    def events(self, body: list[ast.stmt], scope: Scope, *, no_grad: bool = False) -> list[Event]:
        """The events of ``body`` (a loop body or a function body) read in ``scope``."""
        out: list[Event] = []
        self._stmts(body, Ctx(lookup=scope.kind, no_grad=no_grad), out, scope)
        return out

    # -- statements ---------------------------------------------------------------------------
    def _stmts(self, body: list[ast.stmt], ctx: Ctx, out: list[Event], scope: Scope) -> None:
        defs = [s for s in body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)]
        called = _called_names(body) if defs else set()
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name in called:
                # a nested function called by name runs where it is called, not where it
                # is defined (imagenet's validate() calls run_validate() after eval())
                self._local[stmt.name] = stmt
                continue
            self._stmt(stmt, ctx, out, scope)
            if _exits(stmt):
                # after `if not need_update: continue`, the rest of the block runs only
                # when need_update holds: it sits in the if's other branch
                assert isinstance(stmt, ast.If)
                test, negated = _test(stmt.test)
                ctx = replace(
                    ctx,
                    guards=(*ctx.guards, Guard(test, is_accum_guard(stmt.test), not negated)),
                    branches=(*ctx.branches, (id(stmt), 1)),
                )

    def _stmt(self, s: ast.stmt, ctx: Ctx, out: list[Event], scope: Scope) -> None:
        if isinstance(s, ast.For | ast.AsyncFor):
            self._exprs(s.iter, ctx, out, scope)
            if scope.iterated(s.iter) is not None:
                # `for opt in optimizers:` runs once per optimizer, not once per batch
                inner = ctx
                var, whole = _item_of(s)
                collection = ctx.name(whole)
                if var and collection:
                    inner = replace(ctx, items=ctx.items | {var: collection})
                self._stmts(s.body, inner, out, scope)
                self._stmts(s.orelse, ctx, out, scope)
                return
            inner = replace(
                ctx,
                depth=ctx.depth + 1,
                loopvars=ctx.loopvars | _loopvars(s, ctx),
                loops=(*ctx.loops, id(s)),
                data_loop=ctx.data_loop or is_data_loop(s),
            )
            self._stmts(s.body, inner, out, scope)
            self._stmts(s.orelse, ctx, out, scope)
        elif isinstance(s, ast.While):
            self._exprs(s.test, ctx, out, scope)
            inner = replace(ctx, depth=ctx.depth + 1, loops=(*ctx.loops, id(s)))
            self._stmts(s.body, inner, out, scope)
        elif isinstance(s, ast.If):
            self._exprs(s.test, ctx, out, scope)
            (test, negated), accum = _test(s.test), is_accum_guard(s.test)
            for side, block in enumerate((s.body, s.orelse)):
                inner = replace(
                    ctx,
                    guards=(*ctx.guards, Guard(test, accum, bool(side) != negated)),
                    branches=(*ctx.branches, (id(s), side)),
                )
                self._stmts(block, inner, out, scope)
        elif isinstance(s, ast.With | ast.AsyncWith):
            inner = ctx
            for item in s.items:
                self._exprs(item.context_expr, ctx, out, scope)
                inner = self._with(item.context_expr, inner)
            self._stmts(s.body, inner, out, scope)
        elif isinstance(s, ast.Try):
            self._stmts(s.body, ctx, out, scope)
            for handler in s.handlers:
                self._stmts(handler.body, ctx, out, scope)
            self._stmts(s.orelse, ctx, out, scope)
            self._stmts(s.finalbody, ctx, out, scope)
        elif isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef):
            self._stmts(s.body, replace(ctx, closure=True), out, scope)
        elif isinstance(s, ast.ClassDef):
            return
        elif isinstance(s, ast.Match):
            self._exprs(s.subject, ctx, out, scope)
            for i, case in enumerate(s.cases):
                inner = replace(ctx, branches=(*ctx.branches, (id(s), i)))
                self._stmts(case.body, inner, out, scope)
        else:
            self._simple(s, ctx, out, scope)

    def _with(self, item: ast.expr, ctx: Ctx) -> Ctx:
        call = item.func if isinstance(item, ast.Call) else item
        q = self.src.qualname(call) or ""
        if q.endswith(("no_grad", "inference_mode")):
            return replace(ctx, no_grad=True)
        if isinstance(call, ast.Attribute) and call.attr in ("accumulate", "no_sync"):
            k = ctx.lookup(ctx.name(call.value) or "")
            if call.attr == "accumulate" and (k is None or k.kind == ACCELERATOR):
                return replace(ctx, managed=True)
        return ctx

    def _simple(self, s: ast.stmt, ctx: Ctx, out: list[Event], scope: Scope) -> None:
        targets: list[ast.expr] = []
        if isinstance(s, ast.Assign):
            targets = s.targets
        elif isinstance(s, ast.AugAssign | ast.AnnAssign):
            targets = [s.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == "grad" and isinstance(s, ast.Assign):
                if clears(s.value):  # `p.grad = None` clears; `p.grad = g` writes (surgery)
                    target = ctx.loopvars.get(text(t.value) or "")
                    out.append(self._ev(ZERO, ctx, s, target=target))
            elif isinstance(s, ast.AugAssign) and _manual(t, ctx):
                out.append(self._ev(UPDATE, ctx, s))
        for child in ast.iter_child_nodes(s):
            if isinstance(child, ast.expr):
                self._exprs(child, ctx, out, scope)

    def _exprs(self, node: ast.expr, ctx: Ctx, out: list[Event], scope: Scope) -> None:
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
        calls.sort(key=lambda c: (c.end_lineno or 0, c.end_col_offset or 0))  # inner first
        for call in calls:
            self._call(call, ctx, out, scope)

    # -- calls --------------------------------------------------------------------------------
    def _call(self, c: ast.Call, ctx: Ctx, out: list[Event], scope: Scope) -> None:
        func = c.func
        if isinstance(func, ast.Attribute) and self._method(c, func, ctx, out, scope):
            return
        nested = self._local.get(func.id) if isinstance(func, ast.Name) else None
        if nested is not None and id(nested) not in self._active:
            self._active.add(id(nested))
            try:
                self._inline(nested, c, ctx, out, scope, local=True)
            finally:
                self._active.discard(id(nested))
            return
        helper = self._helper(func, ctx, scope)
        if helper is not None:
            self._inline(helper, c, ctx, out, scope)
            return
        q = self.src.qualname(func)
        if q is not None and q.startswith("torch.") and q.rsplit(".", 1)[-1] in _CLIPS:
            self._clip(c, ctx, out, scope)
        elif q == "torch.autograd.backward" and c.args:
            out.append(self._ev(BACKWARD, ctx, c, operand=c.args[0]))
        elif q is not None and q.startswith("torch._foreach_") and q.endswith("_"):
            out.append(self._ev(UPDATE, ctx, c))
        elif (q is None or q.split(".")[0] not in _KNOWN_LIBRARIES) and not (
            isinstance(func, ast.Name) and func.id in _BUILTINS
        ):
            args = tuple(ctx.name(a) or "" for a in [*c.args, *(k.value for k in c.keywords)])
            target = ctx.name(func)
            tkind = ctx.lookup(target) if target else None
            out.append(self._ev(CALL, ctx, c, target=target, tkind=tkind, args=args))

    def _method(
        self, c: ast.Call, func: ast.Attribute, ctx: Ctx, out: list[Event], scope: Scope
    ) -> bool:
        attr, recv = func.attr, func.value
        target = ctx.name(recv)
        kind = ctx.lookup(target) if target else None
        if isinstance(recv, ast.Subscript) and ctx.name(recv.value):  # optimizers[0].step()
            whole = ctx.lookup(ctx.name(recv.value) or "")
            if whole is not None and whole.many:
                target = f"{ctx.name(recv.value)}[{ast.unparse(recv.slice)}]"
                kind = whole.element()
        if attr in ("backward", "manual_backward"):
            q = self.src.qualname(recv) or ""
            if q.startswith("torch.distributed") or (kind is not None and kind.kind == ENGINE):
                return True
            by_arg = attr == "manual_backward" or (
                bool(c.args)
                and (
                    (kind is not None and kind.kind == ACCELERATOR)
                    or bool(target and _BACKWARD_CALLERS.search(target))
                )
            )
            operand = (c.args[0] if c.args else None) if by_arg else recv
            out.append(self._ev(BACKWARD, ctx, c, operand=operand))
            return True
        if attr == "step":
            if kind is None:
                return False
            if kind.kind == OPTIMIZER:
                closure = bool(c.args) or any(k.arg == "closure" for k in c.keywords)
                out.append(
                    self._ev(
                        STEP,
                        ctx,
                        c,
                        target=target,
                        tkind=kind,
                        closure=closure,
                        of=ctx.items.get(target or ""),
                    )
                )
            elif kind.kind == SCALER and c.args:
                t = ctx.name(c.args[0])
                out.append(self._ev(STEP, ctx, c, target=t, tkind=ctx.lookup(t) if t else None))
            elif kind.kind == SCHEDULER:
                out.append(self._ev(SCHED_STEP, ctx, c, target=target))
            return True
        if attr == "zero_grad":
            if kind is None or kind.kind != ENGINE:
                of = ctx.items.get(target or "")
                out.append(self._ev(ZERO, ctx, c, target=target, tkind=kind, of=of))
            return True
        if attr in ("eval", "train"):
            mode = _mode(attr, c)
            if mode is not None:
                out.append(self._ev(mode, ctx, c, target=target, tkind=kind))
                return True
            return False
        if attr in _CLIPS:
            self._clip(c, ctx, out, scope)
            return True
        grad_of = _grad_owner(recv)
        if grad_of is not None and (attr == "zero_" or (attr in _ZEROING and _zero_arg(c))):
            # p.grad.zero_(), p.grad.data.zero_(), p.grad.data.fill_(0), p.grad.mul_(0)
            base = grad_of
            out.append(self._ev(ZERO, ctx, c, target=ctx.loopvars.get(base)))
            return True
        if attr in _INPLACE_UPDATES and grad_of is None and _manual(recv, ctx):
            out.append(self._ev(UPDATE, ctx, c))
            return True
        return False

    def _clip(self, c: ast.Call, ctx: Ctx, out: list[Event], scope: Scope) -> None:
        """A gradient clipping call: its ``args`` name what it clips, as the caller names
        it: the modules whose ``.parameters()`` it is given and every name in its first
        argument (a parameter list, a module, an optimizer's ``param_groups``)."""
        given = c.args[0] if c.args else None
        for k in c.keywords:
            if k.arg in ("parameters", "module", "optimizer"):
                given = given or k.value
        if given is None:
            return
        roots, _ = scope.param_roots(given)
        names: list[str | None] = [*(roots or ())]
        for a in c.args[:2]:  # a parameter list, a module (Fabric), an optimizer (Lightning)
            if isinstance(a, ast.Name | ast.Attribute):
                names.append(text(a))
        value = scope.value_before(given.id, c.lineno) if isinstance(given, ast.Name) else None
        names += [  # opt.param_groups[...]["params"]: the optimizer's own parameters
            text(n.value)
            for n in (*ast.walk(given), *(ast.walk(value) if value is not None else ()))
            if isinstance(n, ast.Attribute) and n.attr == "param_groups"
        ]
        args = tuple(dict.fromkeys(n for n in (ctx.name_of(x) for x in names) if n))
        out.append(self._ev(CLIP, ctx, c, args=args))

    def _helper(self, func: ast.expr, ctx: Ctx, scope: Scope) -> Function | None:
        if not ctx.inline:
            return None
        if isinstance(func, ast.Name):
            return self.src.functions.get(func.id)
        if isinstance(func, ast.Attribute) and text(func.value) == "self" and scope.cls:
            for item in scope.cls.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    item.name == func.attr
                ):
                    return item
        return None

    def _inline(
        self,
        fn: Function,
        c: ast.Call,
        ctx: Ctx,
        out: list[Event],
        scope: Scope,
        *,
        local: bool = False,
    ) -> None:
        """Walk ``fn``'s body where it is called. ``local``: a function nested in the code
        being walked, which sees its enclosing names (and keeps the caller's ``via``)."""
        parent = self.cls_scopes.get(scope.cls.name, self.module) if scope.cls else self.module
        if local:
            parent = scope
        key = id(fn)
        if key not in self._scopes:
            self._scopes[key] = function_scope(self.src, fn, parent)
        inner_scope = self._scopes[key]
        names = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
        if names and names[0] == "self" and isinstance(c.func, ast.Attribute):
            names = names[1:]
        subst: dict[str, str | None] = {}
        if local:  # free names keep the enclosing code's renaming, unless assigned here
            subst = {
                k: v
                for k, v in ctx.subst.items()
                if k not in inner_scope.assigns and k not in inner_scope.params
            }
        for name, arg in zip(names, c.args, strict=False):
            subst[name] = ctx.name(arg)
        for kw in c.keywords:
            if kw.arg:
                subst[kw.arg] = ctx.name(kw.value)
        outer = ctx.lookup

        def lookup(dotted: str) -> Kind | None:
            root = dotted.split(".", 1)[0]
            local = root in inner_scope.assigns or root in inner_scope.kinds
            if local or (root in inner_scope.params and root not in subst):
                return inner_scope.kind(dotted)
            return outer(dotted)

        decorated = any(
            (self.src.qualname(d.func if isinstance(d, ast.Call) else d) or "").endswith(
                ("no_grad", "inference_mode")
            )
            for d in fn.decorator_list
        )
        inner = replace(
            ctx,
            lookup=lookup,
            via=ctx.via if local else fn.name,
            subst=subst,
            inline=ctx.inline if local else False,
            no_grad=ctx.no_grad or decorated,
        )
        self._stmts(fn.body, inner, out, inner_scope)

    def _ev(self, kind: str, ctx: Ctx, node: ast.AST, **kw: object) -> Event:
        return Event(
            kind,
            node=node,
            depth=ctx.depth,
            guards=ctx.guards,
            branches=ctx.branches,
            closure=bool(kw.pop("closure", False)) or ctx.closure,
            managed=ctx.managed,
            no_grad=ctx.no_grad,
            via=ctx.via,
            loops=ctx.loops,
            data_loop=ctx.data_loop,
            **kw,  # type: ignore[arg-type]
        )


def _item_of(s: ast.For | ast.AsyncFor) -> tuple[str | None, ast.expr]:
    """``opt`` and ``optimizers`` for ``for opt in optimizers`` (also ``for i, opt in
    enumerate(optimizers)``, ``for name, opt in optimizers.items()``)."""
    target = s.target
    if isinstance(target, ast.Tuple) and target.elts:
        target = target.elts[-1]
    it = s.iter
    while isinstance(it, ast.Call) and it.args and isinstance(it.func, ast.Name):
        it = it.args[0]
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
        it = it.func.value  # opts.values(), opts.items()
    return text(target), it


def _test(test: ast.expr) -> tuple[str, bool]:
    """An ``if`` test as text, and whether it is negated: ``not need_update`` is
    ``need_update`` negated, so both branches name the same condition."""
    negated = False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, not negated
    return ast.unparse(test), negated


def _exits(s: ast.stmt) -> bool:
    """``if ...: continue`` (or break, return, raise) with no ``else``."""
    return (
        isinstance(s, ast.If)
        and not s.orelse
        and bool(s.body)
        and isinstance(s.body[-1], ast.Continue | ast.Break | ast.Return | ast.Raise)
    )


def _called_names(body: list[ast.stmt]) -> set[str]:
    """Names called as ``name(...)`` in ``body``, outside the functions it defines."""
    out: set[str] = set()
    stack: list[ast.AST] = [
        s for s in body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            out.add(node.func.id)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _mode(attr: str, c: ast.Call) -> str | None:
    if attr == "eval":
        return EVAL if not c.args and not c.keywords else None
    values = [*c.args, *(k.value for k in c.keywords if k.arg == "mode")]
    if len(values) + len([k for k in c.keywords if k.arg != "mode"]) > 1:
        return None
    if not values:
        return TRAIN
    v = values[0]
    if isinstance(v, ast.Constant) and isinstance(v.value, bool):
        return TRAIN if v.value else EVAL
    return None


def _loopvars(s: ast.For | ast.AsyncFor, ctx: Ctx) -> dict[str, str | None]:
    it = s.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute)):
        return {}
    if it.func.attr not in ("parameters", "named_parameters"):
        return {}
    root = ctx.name(it.func.value)
    target = s.target
    if isinstance(target, ast.Tuple) and target.elts:
        target = target.elts[-1]
    return {target.id: root} if isinstance(target, ast.Name) else {}


def _grad_owner(node: ast.expr) -> str | None:
    """``p`` for ``p.grad``, ``p.grad.data`` or ``p.grad.detach_()``; None otherwise."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value  # p.grad.detach_()
    dotted = text(node) or ""
    head, sep, _ = dotted.partition(".grad")
    return head if sep and dotted[len(head) + 5 :] in ("", ".data") else None


def _manual(node: ast.expr, ctx: Ctx) -> bool:
    dotted = text(node) or ""
    return dotted.endswith(".data") or dotted in ctx.loopvars


#: calls whose value is a tensor of zeros (a gradient set to one is cleared)
_ZEROS = frozenset({"zeros", "zeros_like", "new_zeros"})


def clears(value: ast.expr) -> bool:
    """Whether ``p.grad = value`` clears the gradient (``None``, a tensor of zeros) rather
    than writing one (a merged or projected gradient: PCGrad's gradient surgery)."""
    if isinstance(value, ast.Constant) and value.value is None:
        return True
    if isinstance(value, ast.Call):
        f = value.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return name in _ZEROS
    return False


def writes_gradients(node: ast.AST) -> bool:
    """Whether the code under ``node`` writes a gradient by hand (``p.grad = g`` with ``g``
    not None or zeros): the program composes the gradients its step applies itself."""
    return any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in n.targets)
        and not clears(n.value)
        for n in ast.walk(node)
    )
