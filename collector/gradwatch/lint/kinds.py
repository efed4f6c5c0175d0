"""What the names of a function hold: optimizers, modules, losses, loaders...

Kinds come from the values assigned (resolved through the file's imports, never from a
variable's name alone); a name whose origin is not visible — a function parameter, an
attribute set elsewhere — falls back to its name (``optimizer``, ``opt_d``, ``scheduler``)
and is marked ``guessed``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace

from gradwatch.lint.source import Source, text

OPTIMIZER, SCHEDULER, SCALER, LOSS, MODULE = "optimizer", "scheduler", "scaler", "loss", "module"
LOADER, SAMPLER, ENGINE, ACCELERATOR, OTHER = "loader", "sampler", "engine", "accelerator", "other"
AVERAGER = "averager"  # a weight-averaged copy of a model (SWA, EMA): never an optimizer

#: Packages whose capitalised callables are optimizers (``torch.optim.Adam``, ``Lion``...).
_OPT_PREFIXES = (
    "torch.optim.", "bitsandbytes.optim.", "apex.optimizers.", "timm.optim.",
    "torch_optimizer.", "pytorch_optimizer.", "lion_pytorch.", "adabelief_pytorch.",
    "dadaptation.", "prodigyopt.", "schedulefree.", "deepspeed.ops.adam.", "deepspeed.ops.lamb.",
    "galore_torch.", "came_pytorch.", "muon.", "heavyball.",
)  # fmt: skip
_OPT_NAMES = (
    "transformers.AdamW", "transformers.Adafactor",
    "transformers.optimization.AdamW", "transformers.optimization.Adafactor",
)  # fmt: skip
#: Constructors of weight averagers: torch's AveragedModel, timm's ModelEma*, torch_ema's
#: ExponentialMovingAverage, diffusers' EMAModel, ema_pytorch's EMA...
_AVERAGER_CTOR = re.compile(r"^(AveragedModel|ExponentialMovingAverage|ModelEma|EMA|Ema)")
#: Names of weight averagers whose value is not visible: ``ema``, ``model_ema``, ``swa_model``.
_AVERAGER_NAME = re.compile(r"(^|_)(ema|swa)($|_|\d)", re.IGNORECASE)
_FACTORIES: set[int] = set()  # same-file factory functions being read (no recursion)
_OPT_NAME = re.compile(r"(^|_)(opt|optim|optimi[sz]er)(?=$|_|\d|[A-Z])")
_SAME_OBJECT = {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval"}
_WRAPPERS = ("torch.compile", "DistributedDataParallel", "DataParallel")
#: Capitalised names under torch.nn that are tensors, not modules.
_NN_TENSORS = ("Parameter", "UninitializedParameter", "Buffer", "UninitializedBuffer")


@dataclass(frozen=True)
class Kind:
    """What one name holds. ``roots``: the modules an optimizer's parameters come from
    (None when not visible); ``filtered``: built from ``requires_grad`` parameters only."""

    kind: str
    detail: str = ""
    roots: tuple[str, ...] | None = None
    filtered: bool = False
    guessed: bool = False
    value: ast.expr | None = None
    line: int = 0
    many: bool = False  # a list, tuple or dict of such objects

    def element(self) -> Kind:
        """The kind of one item of a collection of this kind."""
        return replace(self, many=False)


def guess(dotted: str) -> Kind | None:
    """A kind from a name alone (for names whose value is not visible)."""
    last = dotted.rsplit(".", 1)[-1]
    low = last.lower()
    if "sched" in low:
        return Kind(SCHEDULER, guessed=True)
    if "scaler" in low:
        return Kind(SCALER, guessed=True)
    if "optimizer" in low or "optimiser" in low or _OPT_NAME.search(last):
        return Kind(OPTIMIZER, guessed=True)
    if _AVERAGER_NAME.search(last):
        return Kind(AVERAGER, guessed=True)
    if "accelerator" in low or low == "fabric":
        return Kind(ACCELERATOR, guessed=True)
    return None


@dataclass
class Scope:
    """The names of one function (or of the module), with the enclosing scopes behind."""

    src: Source
    node: ast.AST
    parent: Scope | None = None
    cls: ast.ClassDef | None = None
    kinds: dict[str, Kind] = field(default_factory=dict)
    assigns: dict[str, list[tuple[int, ast.expr]]] = field(default_factory=dict)
    params: list[str] = field(default_factory=list)

    def kind(self, dotted: str | None, *, allow_guess: bool = True) -> Kind | None:
        """The kind of ``dotted`` here, in the class's attributes, or in the module."""
        if dotted is None:
            return None
        scope: Scope | None = self
        while scope is not None:
            if dotted in scope.kinds:
                return scope.kinds[dotted]
            scope = scope.parent
        return guess(dotted) if allow_guess else None

    def value_before(self, name: str, line: int) -> ast.expr | None:
        """The value last assigned to ``name`` before ``line`` in this scope or above."""
        scope: Scope | None = self
        while scope is not None:
            found = [v for at, v in scope.assigns.get(name, []) if at < line]
            if found:
                return found[-1]
            if name in scope.params:
                return None
            scope = scope.parent
        return None

    # -- building -----------------------------------------------------------------------------
    def fill(self, body: list[ast.stmt]) -> Scope:
        """Record the assignments of ``body`` (not of nested functions or classes)."""
        for node in _own_nodes(body):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._assign(target, node.value, node.lineno)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._assign(node.target, node.value, node.lineno)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                merged = ast.BinOp(left=node.target, op=node.op, right=node.value)
                ast.copy_location(merged, node)
                self.assigns.setdefault(node.target.id, []).append((node.lineno, merged))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                for name in ast.walk(node.target):
                    if isinstance(name, ast.Name):  # loop variables hold data, not values
                        self.assigns.setdefault(name.id, []).append((0, ast.Constant(None)))
                item = self.iterated(node.iter)
                target = node.target
                if isinstance(target, ast.Tuple) and target.elts:  # for name, opt in d.items()
                    target = target.elts[-1]
                if item is not None and text(target):
                    self.kinds[text(target) or ""] = item
        return self

    def _assign(self, target: ast.expr, value: ast.expr, line: int) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            kinds = self._unpacked(value, len(target.elts))
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Name):
                    self.assigns.setdefault(elt.id, []).append((line, value))
                name, kind = text(elt), kinds[i]
                if name and kind is not None:
                    self.kinds[name] = kind
            return
        name = text(target)
        if name is None:
            return
        if isinstance(target, ast.Name):
            self.assigns.setdefault(name, []).append((line, value))
        found = self.classify(value, line)
        if found is not None:
            self.kinds[name] = found
            if found.kind == SCHEDULER and isinstance(value, ast.Call):
                self._scheduled(value, line)

    def _scheduled(self, call: ast.Call, line: int) -> None:
        """The optimizer handed to a scheduler is an optimizer, whatever its name."""
        given = call.args[0] if call.args else None
        for kw in call.keywords:
            if kw.arg == "optimizer":
                given = kw.value
        name = text(given) if given is not None else None
        if name and name != "self" and self.kind(name, allow_guess=False) is None:
            self.kinds[name] = Kind(OPTIMIZER, line=line)

    def _unpacked(self, value: ast.expr, n: int) -> list[Kind | None]:
        out: list[Kind | None] = [None] * n
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == n:
            return [self.classify(e) for e in value.elts]
        if not isinstance(value, ast.Call):
            return out
        if self.src.qualname(value.func) == "deepspeed.initialize":
            return [Kind(ENGINE)] * n
        attr = value.func.attr if isinstance(value.func, ast.Attribute) else ""
        if attr in ("prepare", "setup") and len(value.args) == n:
            return [self.kind(text(a), allow_guess=False) for a in value.args]
        whole = self.classify(value)
        if whole is not None and whole.many:  # opt_g, opt_d = self.optimizers()
            return [whole.element()] * n
        return self._factory(value, n) or out

    def iterated(self, it: ast.expr) -> Kind | None:
        """The kind of the items of ``for x in it`` when ``it`` is a collection of
        optimizers or schedulers (``optimizers``, ``opts.values()``, ``opts.items()``,
        ``enumerate(optimizers)``)."""
        if (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id in ("enumerate", "reversed", "list", "tuple", "sorted")
            and it.args
        ):
            it = it.args[0]
        if (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr in ("values", "items")
        ):
            it = it.func.value
        found = self.classify(it)
        return found.element() if found is not None and found.many else None

    def classify(self, value: ast.expr, line: int = 0) -> Kind | None:
        """The kind of object an expression evaluates to, when it can be told."""
        if isinstance(value, ast.Name | ast.Attribute):
            return self.kind(text(value), allow_guess=False)
        if isinstance(value, ast.List | ast.Tuple | ast.Set | ast.Dict):
            return self._collection(value, line)
        if isinstance(value, ast.Subscript):  # optimizers[0], optimizers["g"]
            whole = self.classify(value.value, line)
            return whole.element() if whole is not None and whole.many else None
        if not isinstance(value, ast.Call):
            return None
        func = value.func
        q = self.src.qualname(func) or ""
        last = q.rsplit(".", 1)[-1] if q else (text(func) or "").rsplit(".", 1)[-1]
        if q.startswith("torch.optim.swa_utils."):
            if last == "SWALR":
                return Kind(SCHEDULER, last, line=line)
            return Kind(AVERAGER if last == "AveragedModel" else OTHER, last, line=line)
        if q.startswith(("torch.optim.lr_scheduler", "timm.scheduler.")) or (
            q.startswith("transformers.") and "schedule" in last
        ):
            return Kind(SCHEDULER, last, line=line)
        if q.startswith("torch.distributed.optim.") and last != "ZeroRedundancyOptimizer":
            return Kind(OTHER, last)
        if _optimizer_by_name(self.src, func):  # getattr(optim, args.optim)(params, lr=...)
            return self._optimizer(value, "getattr(torch.optim)", line)
        if self._is_optimizer_ctor(q, last, func):  # schedulefree's AdamWScheduleFree too
            return self._optimizer(value, last, line)
        if "sched" in last.lower():  # WarmupCosineSchedule(...), create_scheduler(...)
            return Kind(SCHEDULER, last, line=line)
        if _AVERAGER_CTOR.match(last):
            return Kind(AVERAGER, last, line=line)
        if q in ("copy.deepcopy", "copy.copy") and value.args:  # a copy is what it copies
            return self.classify(value.args[0], line)
        if last.endswith("GradScaler"):
            return Kind(SCALER, last, line=line)
        if q.startswith("torch.nn.") and last.endswith("Loss"):
            return Kind(LOSS, last, value=value, line=line)
        if q.startswith("torch.nn.") and last in _NN_TENSORS:
            return None
        if (q.startswith("torch.nn.") and last[:1].isupper() and not q.endswith(_WRAPPERS)) or (
            q.startswith(("torchvision.models.", "timm.create_model")) or last == "from_pretrained"
        ):
            return Kind(MODULE, last, value=value, line=line)
        if isinstance(func, ast.Name) and self.src.is_module_class(func.id):
            return Kind(MODULE, func.id, value=value, line=line)
        if last == "DataLoader":
            return Kind(LOADER, last, value=value, line=line)
        if last == "DistributedSampler":
            return Kind(SAMPLER, last, value=value, line=line)
        if last in ("Accelerator", "Fabric"):
            return Kind(ACCELERATOR, last)
        if isinstance(func, ast.Attribute) and text(func.value) == "self":
            # Lightning: self.optimizers() / self.lr_schedulers(), one object or a list
            if func.attr == "optimizers":
                return Kind(OPTIMIZER, "optimizers", many=True)
            if func.attr == "lr_schedulers":
                return Kind(SCHEDULER, "lr_schedulers", many=True)
        if isinstance(func, ast.Attribute) and func.attr in _SAME_OBJECT:
            return self.classify(func.value, line)
        if (q.endswith(_WRAPPERS) or last in _WRAPPERS) and value.args:
            return self.classify(value.args[0], line)
        if isinstance(func, ast.Attribute) and func.attr in ("values", "copy"):
            whole = self.classify(func.value, line)
            return whole if whole is not None and whole.many else None
        made = self._factory(value, 1)
        return made[0] if made else None

    def _collection(self, value: ast.expr, line: int) -> Kind | None:
        """A list, tuple, set or dict whose items are all optimizers (or all schedulers)."""
        items = value.values if isinstance(value, ast.Dict) else getattr(value, "elts", [])
        kinds = [self.classify(v, line) for v in items]
        if not kinds or any(k is None or k.many for k in kinds):
            return None
        first = kinds[0]
        assert first is not None
        if first.kind not in (OPTIMIZER, SCHEDULER) or any(
            k is not None and k.kind != first.kind for k in kinds
        ):
            return None
        return replace(first, many=True, roots=None, value=value, line=line)

    def _factory(self, call: ast.Call, n: int) -> list[Kind | None] | None:
        """What a same-file function returns (``make_optimizer(model)``, a tuple of an
        optimizer and its scheduler), its parameters read as the caller's arguments."""
        fn = self.src.functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if fn is None or id(fn) in _FACTORIES:
            return None
        _FACTORIES.add(id(fn))
        try:
            root: Scope = self
            while root.parent is not None:
                root = root.parent
            inner = function_scope(self.src, fn, root)
            names = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
            subst = {p: text(arg) for p, arg in zip(names, call.args, strict=False)}
            subst |= {kw.arg: text(kw.value) for kw in call.keywords if kw.arg}
            for node in own_nodes(fn.body):
                if not isinstance(node, ast.Return) or node.value is None:
                    continue
                ret = node.value
                if n == 1:
                    got = [inner.classify(ret)]
                elif isinstance(ret, ast.Tuple) and len(ret.elts) == n:
                    got = [inner.classify(e) for e in ret.elts]
                else:
                    continue
                if any(k is not None for k in got):
                    return [_renamed(k, subst) for k in got]
            return None
        finally:
            _FACTORIES.discard(id(fn))

    def _is_optimizer_ctor(self, q: str, last: str, func: ast.expr) -> bool:
        if q in _OPT_NAMES or (q.startswith(_OPT_PREFIXES) and last[:1].isupper()):
            return "lr_scheduler" not in q and last != "Optimizer"
        if q.startswith("timm.optim.") and last.startswith("create_optimizer"):
            return True
        if isinstance(func, ast.Name) and func.id in self.src.classes:
            bases = self.src.base_names(self.src.classes[func.id])
            return any(b.startswith("torch.optim.") for b in bases)
        return q.endswith("ZeroRedundancyOptimizer")

    def _optimizer(self, call: ast.Call, last: str, line: int) -> Kind:
        params: ast.expr | None = call.args[0] if call.args else None
        for kw in call.keywords:
            if kw.arg in ("params", "model_or_params"):
                params = kw.value
        roots, filtered = self.param_roots(params)
        return Kind(OPTIMIZER, last, roots=roots, filtered=filtered, value=call, line=line)

    def param_roots(
        self, params: ast.expr | None, depth: int = 0
    ) -> tuple[tuple[str, ...] | None, bool]:
        """The modules whose ``.parameters()`` feed ``params``, and whether they are
        filtered on ``requires_grad``."""
        if params is None:
            return None, False
        if isinstance(params, ast.Name) and depth < 2:
            value = self.value_before(params.id, 10**9)
            if value is not None:
                return self.param_roots(value, depth + 1)
            if self.kind(params.id, allow_guess=False) is not None:  # a module given whole
                return (params.id,), False
        roots: list[str] = []
        for node in ast.walk(params):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("parameters", "named_parameters")
            ):
                root = text(node.func.value)
                if root and root not in roots:
                    roots.append(root)
        filtered = "requires_grad" in ast.unparse(params)
        return (tuple(roots) if roots else None), filtered


def _optimizer_by_name(src: Source, func: ast.expr) -> bool:
    """``func`` is ``getattr(torch.optim, name)``: an optimizer class chosen by a flag."""
    return (
        isinstance(func, ast.Call)
        and isinstance(func.func, ast.Name)
        and func.func.id == "getattr"
        and len(func.args) >= 2
        and src.qualname(func.args[0]) == "torch.optim"
    )


def _renamed(k: Kind | None, subst: dict[str, str | None]) -> Kind | None:
    """``k`` with the roots of its parameters named as the caller names them."""
    if k is None or not k.roots:
        return k
    roots = []
    for r in k.roots:
        head, dot, rest = r.partition(".")
        if head in subst:
            mapped = subst[head]
            if mapped is None:
                return replace(k, roots=None)
            r = mapped + dot + rest
        roots.append(r)
    return replace(k, roots=tuple(roots))


_CACHE: dict[int, tuple[list[ast.stmt], list[ast.AST]]] = {}


def _own_nodes(body: list[ast.stmt]) -> list[ast.AST]:
    """Every node of ``body`` in source order, not entering nested functions or classes
    (cached while ``body`` lives: rules ask for the same blocks many times)."""
    hit = _CACHE.get(id(body))
    if hit is not None and hit[0] is body:
        return hit[1]
    if len(_CACHE) > 4096:
        _CACHE.clear()
    out = _walk_own(body)
    _CACHE[id(body)] = (body, out)
    return out


def _walk_own(body: list[ast.stmt]) -> list[ast.AST]:
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def own_nodes(body: list[ast.stmt]) -> list[ast.AST]:
    """Public form of :func:`_own_nodes`."""
    return _own_nodes(body)


def module_scope(src: Source) -> Scope:
    """The module's names."""
    return Scope(src, src.tree).fill(src.tree.body)


def class_scope(src: Source, cls: ast.ClassDef, parent: Scope) -> Scope:
    """``self.x`` attributes assigned in any method of ``cls``."""
    scope = Scope(src, cls, parent=parent, cls=cls)
    for item in cls.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            inner = Scope(src, item, parent=scope, cls=cls).fill(item.body)
            for name, kind in inner.kinds.items():
                if name.startswith("self."):
                    scope.kinds.setdefault(name, kind)
    return scope


def function_scope(src: Source, fn: ast.FunctionDef | ast.AsyncFunctionDef, parent: Scope) -> Scope:
    """A function's names: its parameters (annotated optimizers count) and assignments."""
    scope = Scope(src, fn, parent=parent, cls=parent.cls)
    args = fn.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        scope.params.append(a.arg)
        q = src.qualname(a.annotation) or ""
        if q.startswith("torch.optim.") and q.rsplit(".", 1)[-1][:1].isupper():
            scope.kinds[a.arg] = Kind(OPTIMIZER, q.rsplit(".", 1)[-1])
        elif q in ("torch.nn.Module",) or (
            isinstance(a.annotation, ast.Name) and src.is_module_class(a.annotation.id)
        ):
            scope.kinds[a.arg] = Kind(MODULE)
    return scope.fill(fn.body)
