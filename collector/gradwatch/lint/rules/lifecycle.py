"""Optimizer lifecycle rules: ``stale-grad``, ``grad-zeroed-before-step``,
``accumulation-wiped``, ``accumulation-loss-not-scaled``, ``backward-without-step``.

Each runs on the *step-owning* loop: a loop with an optimizer ``step()`` directly in its
body (not in a nested loop; code of a same-file helper called there counts as the body).
"""

from __future__ import annotations

import ast

from gradwatch.core import checkids
from gradwatch.lint.analysis import Analysis, Unit
from gradwatch.lint.events import writes_gradients
from gradwatch.lint.facts import BACKWARD, CALL, CLIP, STEP, UPDATE, ZERO, Event
from gradwatch.lint.kinds import OPTIMIZER, Kind, Scope
from gradwatch.lint.source import text

_SAME_VALUE = {"mean", "sum", "float", "to", "squeeze", "view", "reshape", "clone"}


def related(a: str, b: str) -> bool:
    """``model`` and ``model.fc`` name overlapping modules."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def covers(zero: Event, step: Event, scope: Scope) -> bool:
    """Whether ``zero`` clears the gradients ``step`` applies."""
    if zero.target is None or zero.target == step.target:
        return True
    if zero.of is not None and (  # a zero_grad over every item of the collection
        zero.of == step.of or (step.target or "").startswith(zero.of + "[")
    ):
        return True
    if zero.tkind is not None and zero.tkind.kind == OPTIMIZER:
        return False  # another optimizer's zero_grad
    roots = step.tkind.roots if step.tkind is not None else None
    if roots is None:
        return True  # a module's zero_grad and an optimizer whose parameters are not visible
    if any(related(zero.target, r) for r in roots):
        return True
    value = scope.value_before(zero.target.split(".")[0], 10**9)  # wrappers: DDP(model)
    names = {text(n) for n in ast.walk(value)} if value is not None else set()
    return any(r in names for r in roots)


def _tests(e: Event) -> set[str]:
    """The accumulation-like conditions an event runs under, as they read
    (`(i + 1) % k == 0`, `need_update`, `not is_accumulating`)."""
    return {f"not {g.test}" if g.negated else g.test for g in e.guards if g.accum}


def feeding(st: Event, zeros: list[Event], backwards: list[Event], ev: list[Event]) -> list[Event]:
    """The backward() calls whose gradients ``st`` applies: those after the last of
    ``zeros`` (its optimizer's zero_grad calls) before it, wrapping round the loop when the
    gradients are cleared after the step."""
    at = {id(e): i for i, e in enumerate(ev)}
    s = at[id(st)]
    cuts = [at[id(z)] for z in zeros if not z.closure and not z.exclusive(st)]
    before = [i for i in cuts if i < s]
    if before:
        start = max(before)
        inside = [b for b in backwards if start < at[id(b)] < s]
    elif cuts:
        start = max(cuts)
        inside = [b for b in backwards if at[id(b)] < s or at[id(b)] > start]
    else:
        inside = list(backwards)
    return [b for b in inside if not b.exclusive(st) and not b.closure]


def accumulates(st: Event, zeros: list[Event], backwards: list[Event], ev: list[Event]) -> bool:
    """Whether ``st`` runs only every few iterations (`if (i + 1) % k == 0`) while some of
    the gradients it applies are computed in the iterations between: accumulation. A
    guarded step whose whole backward runs under the same test (a WGAN generator trained
    every ``n_critic`` iterations) applies one iteration's gradient, not an accumulation."""
    tests = _tests(st)
    return bool(tests) and any(not tests <= _tests(b) for b in feeding(st, zeros, backwards, ev))


def check(a: Analysis) -> None:
    for unit in a.lifecycle_units():
        blocks: list[ast.AST] = list(unit.loops)
        if unit.virtual_loop:
            blocks.append(unit.node)
        for loop in blocks:
            events = a.events(unit, None if loop is unit.node else loop)
            _loop(a, unit, loop, events)
        if not unit.virtual_loop and not unit.is_module:
            _clip_order_in_body(a, unit)
        _without_step(a, unit)


def _clip_order_in_body(a: Analysis, unit: Unit) -> None:
    """``clip-before-backward`` for a step in a function's own body (not in a loop there: a
    ``train_net()`` called once per episode): the order of one call is evidence enough."""
    ev = a.events(unit, None)
    steps = [e for e in ev if e.kind == STEP and e.depth == 0 and e.target and not e.closure]
    backwards = [e for e in ev if e.kind == BACKWARD]
    zeros = [e for e in ev if e.kind == ZERO]
    only = len({st.target for st in steps}) == 1
    for st in steps:
        mine = [z for z in zeros if covers(z, st, unit.scope)]
        _clip_first(a, unit, unit.node, st, mine, backwards, ev, only)


def _loop(a: Analysis, unit: Unit, loop: ast.AST, ev: list[Event]) -> None:
    steps = [e for e in ev if e.kind == STEP and e.depth == 0 and e.target]
    backwards = [e for e in ev if e.kind == BACKWARD]
    if not steps or not backwards:
        return
    zeros = [e for e in ev if e.kind == ZERO]
    only = len({st.target for st in steps}) == 1  # one optimizer steps here
    seen: set[str] = set()
    for st in steps:
        mine = [z for z in zeros if covers(z, st, unit.scope)]
        if not mine and st.target not in seen:
            seen.add(st.target or "")
            _stale(a, unit, loop, st, ev)
        if not st.closure:
            _zero_between(a, unit, loop, st, mine, backwards, ev)
        if not st.managed:
            _wiped(a, unit, loop, st, mine, backwards, ev)
        if not st.closure:
            _clip_first(a, unit, loop, st, mine, backwards, ev, only)
    _unscaled(a, unit, loop, steps, backwards, [z for z in zeros], ev)


def _stale(a: Analysis, unit: Unit, loop: ast.AST, st: Event, ev: list[Event]) -> None:
    target = st.target or ""
    hidden = [e for e in ev if e.kind == CALL and any(a and related(a, target) for a in e.args)]
    where = f" (in {st.via}())" if st.via else ""
    every = (
        f"every {unit.name.rsplit('.', 1)[-1]}()"
        if loop is unit.node
        else f"every iteration of the loop at line {getattr(loop, 'lineno', '?')}"
    )
    a.emit(
        checkids.STALE_GRAD,
        st.node,
        f"{st.target}.step(){where} runs {every}, but nothing there clears {st.target}'s "
        "gradients: each step applies the sum of all earlier gradients.",
        unit,
        severity="warning" if hidden or (st.tkind and st.tkind.guessed) else None,
        confidence="medium" if hidden else "high",
        loop=loop,
    )


def clips_for(clip: Event, st: Event, only: bool) -> bool:
    """Whether ``clip`` clips gradients that ``st`` applies: it names the optimizer, or a
    module its parameters come from; or, where the optimizer's parameters are not visible
    (``model.configure_optimizers()``), ``st`` steps the ``only`` optimizer of the code:
    clipping there is for it. Otherwise no: another model's clipping (a GAN's
    discriminator) is not this step's."""
    if st.target and st.target in clip.args:
        return True
    roots = st.tkind.roots if st.tkind is not None else None
    if roots is None:
        return only
    return any(related(arg, r) for arg in clip.args for r in roots)


def _clip_first(
    a: Analysis,
    unit: Unit,
    loop: ast.AST,
    st: Event,
    zeros: list[Event],
    backwards: list[Event],
    ev: list[Event],
    only: bool,
) -> None:
    """``clip-before-backward``: the loop clips the step's gradients, but never between the
    last backward() that feeds the step and the step itself: every clip acts on gradients
    the step does not apply (the previous step's, or none after zero_grad)."""
    at = {id(e): i for i, e in enumerate(ev)}
    s = at[id(st)]
    clips = [e for e in ev if e.kind == CLIP and not e.exclusive(st) and clips_for(e, st, only)]
    fed = [at[id(b)] for b in feeding(st, zeros, backwards, ev) if at[id(b)] < s]
    if not clips or not fed:
        return
    last = max(fed)
    if any(last < at[id(c)] < s for c in clips):
        return
    c = clips[0]
    b = ev[last]
    a.emit(
        checkids.CLIP_BEFORE_BACKWARD,
        c.node,
        f"gradients are clipped at line {c.line}, but backward() runs after it (line {b.line}) "
        f"and before {st.target}.step() (line {st.line}): the clipping acts on the previous "
        "step's gradients (or on none after zero_grad), and the step applies unclipped ones.",
        unit,
        loop=loop,
    )


def _zero_between(
    a: Analysis,
    unit: Unit,
    loop: ast.AST,
    st: Event,
    zeros: list[Event],
    backwards: list[Event],
    ev: list[Event],
) -> None:
    at = {id(e): i for i, e in enumerate(ev)}
    s = at[id(st)]
    for z in zeros:
        zi = at[id(z)]
        if zi > s or z.closure or z.exclusive(st):
            continue
        before = [b for b in backwards if at[id(b)] < zi and not b.exclusive(z) and not b.closure]
        after = [b for b in backwards if zi < at[id(b)] < s and not b.exclusive(st)]
        if before and not after:
            a.emit(
                checkids.GRAD_ZEROED_BEFORE_STEP,
                z.node,
                f"gradients are cleared after backward() (line {before[-1].line}) and before "
                f"{st.target}.step() (line {st.line}): that step applies no gradient.",
                unit,
                loop=loop,
            )
            return


#: optimizer classes of torch.optim, as their constructors read (a tensor passed to one is
#: a parameter, not an input)
_OPTIMIZERS = frozenset(
    {"SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Rprop", "Adagrad",
     "Adadelta", "SparseAdam", "LBFGS", "ASGD", "Adafactor", "Muon"}
)  # fmt: skip


def input_gradient_read(unit_node: ast.AST, loop: ast.AST) -> str | None:
    """The name of a tensor whose gradient ``loop`` reads (``delta.grad``) and that the code
    marks as wanting one (``delta.requires_grad = True``, ``delta.requires_grad_()``,
    ``torch.zeros(..., requires_grad=True)``) without giving it to an optimizer: an input
    perturbation or saliency map. Backward passes for it are not micro-batches."""
    wanted: set[str] = set()
    given: set[str] = set()
    for node in ast.walk(unit_node):
        if isinstance(node, ast.Assign):
            wanted.update(
                t.value.id
                for t in node.targets
                if isinstance(t, ast.Attribute)
                and t.attr == "requires_grad"
                and isinstance(t.value, ast.Name)
            )
            value = node.value
            if isinstance(value, ast.Call) and any(
                k.arg == "requires_grad" and not _false(k.value) for k in value.keywords
            ):
                wanted.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Call):
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "requires_grad_"
                and isinstance(f.value, ast.Name)
            ):
                wanted.add(f.value.id)
            name = (
                f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            )
            if name in _OPTIMIZERS:
                given.update(
                    n.id for arg in node.args for n in ast.walk(arg) if isinstance(n, ast.Name)
                )
    free = wanted - given
    for node in ast.walk(loop):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "grad"
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id in free
        ):
            return node.value.id
    return None


def _false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _wiped(
    a: Analysis,
    unit: Unit,
    loop: ast.AST,
    st: Event,
    zeros: list[Event],
    backwards: list[Event],
    ev: list[Event],
) -> None:
    if input_gradient_read(unit.node, loop) is not None:
        return  # the cleared passes are made for an input's gradient (adversarial training)
    if writes_gradients(loop):
        return  # the loop composes the gradients it applies (gradient surgery): it read them
    at = {id(e): i for i, e in enumerate(ev)}
    tests = _tests(st) if accumulates(st, zeros, backwards, ev) else set[str]()
    first_backward = min(at[id(b)] for b in backwards)
    # the passes whose gradients the step applies: a clear inside a loop wipes micro-batches
    # only if that loop's passes reach the step (not when the gradients are cleared again
    # after it, as a GAN clears the generator's after the critic's loop)
    fed = {id(b) for b in feeding(st, zeros, backwards, ev)}
    for z in zeros:
        if z.managed or z.closure:
            continue
        own = [g for g in z.guards if g not in st.guards]
        z_tests = _tests(z)
        message = ""
        if tests and not own and not z_tests:
            whose = f"{z.target}'s gradients are" if z.target else "the gradients are"
            message = (
                f"{whose} cleared every micro-batch while "
                f"{st.target}.step() runs only when `{next(iter(tests))}`: each step applies "
                "the last micro-batch's gradient only."
            )
        elif tests and z_tests & tests:
            if at[id(z)] < first_backward:
                message = (
                    f"zero_grad() runs under the same test as {st.target}.step() but before "
                    "backward(): it wipes the accumulated micro-batches right before each step."
                )
        elif len(z.loops) > len(st.loops) and any(
            b.loops[: len(z.loops)] == z.loops and id(b) in fed for b in backwards
        ):
            message = (
                "zero_grad() runs inside the micro-step loop that calls backward(), while "
                f"{st.target}.step() runs after it: only the last micro-batch is applied."
            )
        if message:
            a.emit(checkids.ACCUMULATION_WIPED, z.node, message, unit, loop=loop)
            return


def _unscaled(
    a: Analysis,
    unit: Unit,
    loop: ast.AST,
    steps: list[Event],
    backwards: list[Event],
    zeros: list[Event],
    ev: list[Event],
) -> None:
    if any(e.managed for e in [*steps, *backwards]) or _averages_grads(loop):
        return
    summed: list[Event] = []  # the backward() calls whose gradients are summed
    for st in steps:
        mine = [z for z in zeros if covers(z, st, unit.scope)]
        if mine and accumulates(st, mine, backwards, ev):  # never cleared: stale-grad
            tests = _tests(st)
            summed += [b for b in feeding(st, mine, backwards, ev) if not tests <= _tests(b)]
        # micro-batches: backward in a loop nested in the step's, feeding this step
        summed += [b for b in feeding(st, mine, backwards, ev) if len(b.loops) > len(st.loops)]
    for b in backwards:
        if not any(b is s for s in summed):
            continue
        if b.via is None and not b.closure and not _scaled(b.operand, unit.scope, b.line, 0):
            a.emit(
                "accumulation-loss-not-scaled",
                b.node,
                "gradients of several micro-batches are summed before each step, but the loss "
                "is not divided by their number: the effective learning rate grows with it.",
                unit,
                loop=loop,
            )


def _averages_grads(loop: ast.AST) -> bool:
    """Whether the loop divides the summed gradients themselves (``p.grad.mul_(1 / n)``,
    ``p.grad /= n``, as MAML's meta-update does) instead of the loss."""
    for node in ast.walk(loop):
        target: ast.expr | None = None
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div | ast.Mult):
            target = node.target
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("mul_", "div_")
        ):
            target = node.func.value
        name = text(target) if target is not None else None
        if name and (name.endswith(".grad") or name.endswith(".grad.data")):
            return True
    return False


def _scaled(expr: ast.expr | None, scope: Scope, line: int, depth: int) -> bool:
    if expr is None or depth > 4:
        return True
    if isinstance(expr, ast.BinOp):
        return isinstance(expr.op, ast.Div | ast.Mult | ast.FloorDiv) or (
            _scaled(expr.left, scope, line, depth + 1) and _scaled(expr.right, scope, line, depth)
        )
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr == "scale" and expr.args:
            return _scaled(expr.args[0], scope, line, depth + 1)
        if scope.src.qualname(expr.func) is None and expr.func.attr in _SAME_VALUE:
            return _scaled(expr.func.value, scope, line, depth + 1)
        return False
    if isinstance(expr, ast.Call):
        fn = scope.src.functions.get(expr.func.id) if isinstance(expr.func, ast.Name) else None
        if fn is not None:
            returns = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value]
            firsts = [r.elts[0] if isinstance(r, ast.Tuple) and r.elts else r for r in returns]
            return any(isinstance(r, ast.BinOp) for r in firsts)
        return False
    if isinstance(expr, ast.Name):
        value = scope.value_before(expr.id, line)
        return value is None or _scaled(value, scope, line, depth + 1)
    if isinstance(expr, ast.Subscript | ast.Attribute):
        return _scaled(expr.value, scope, line, depth + 1)
    return True


def _without_step(a: Analysis, unit: Unit) -> None:
    ev = a.events(unit)
    if any(e.kind in (STEP, UPDATE) or e.managed for e in ev):
        return
    optimizers = {
        name for name, k in _all_kinds(unit.scope).items() if k.kind == OPTIMIZER and not k.guessed
    }
    for p in unit.scope.params:
        k = unit.scope.kind(p)
        if k is not None and k.kind == OPTIMIZER:
            optimizers.add(p)
    if not optimizers:
        return
    if any(e.kind == CALL and set(e.args) & optimizers for e in ev):
        return  # the optimizer goes to code not visible here, which may step it
    for loop in unit.loops:
        lev = a.events(unit, loop)
        backs = [e for e in lev if e.kind == BACKWARD]
        if backs and any(e.kind == ZERO for e in lev):
            a.emit(
                "backward-without-step",
                backs[0].node,
                f"this loop clears gradients and calls backward(), but no optimizer "
                f"({', '.join(sorted(optimizers))}) ever steps: the model never changes.",
                unit,
                loop=loop,
            )
            return


def _all_kinds(scope: Scope) -> dict[str, Kind]:
    out: dict[str, Kind] = {}
    s: Scope | None = scope
    while s is not None:
        for k, v in s.kinds.items():
            out.setdefault(k, v)
        s = s.parent
    return out
