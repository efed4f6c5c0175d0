"""Structure changes mid-run (issue #41) as source mutations, registered in
:data:`mutate.MUTATIONS` beside the bug classes of :mod:`mutate`.

Each one changes how training is put together from optimizer step ``at`` on, the way a
resume path, a validation helper or a flag does, and leaves every step before it as it was:

- ``clip-dropped`` — the program's gradient clipping call is skipped from its call
  ``at + 1`` on (a safeguard dropped; only programs that clip);
- ``scheduler-dropped`` — the program's ``scheduler.step()`` is skipped once ``at``
  backward passes ran (only programs with a scheduler);
- ``eval-after-validation`` — after backward pass ``at`` the model is put in ``eval()``
  and its ``train()`` does nothing any more: a validation that leaves the model in eval
  mode, with the program's own ``model.train()`` calls no longer restoring it (only models
  with dropout or batch norm).

- ``param-group-rebuilt`` — after backward pass ``at`` the optimizer's param groups are
  rebuilt from their entries without their weight decay (an "unfreeze" helper that makes
  new groups; the scheduler keeps the optimizer it had): a structure change the run's
  timeline shows at that step (``structure-change``, info by design: only programs with a
  weight decay).

The replicate cases change one replicate of a group from its first step: the edit is in the
code of every replicate (the code hash is the group's) and active only where the
environment has ``GW_MUTANT=1`` — a stale flag. The injector runs two replicates without it
first, each in its own process, in one data directory, then the mutant; the group's
invariants (``group-invariant``) must name it at its first step:

- ``replicate-frozen-layer`` — the first module of the model with parameters of its own is
  frozen (``requires_grad_(False)``) as the training loop starts;
- ``replicate-no-clip`` — the clipping calls are skipped (only programs that clip);
- ``replicate-no-autocast`` — every ``autocast(...)`` gets ``enabled=False`` (only programs
  that use autocast; on the CPU only where the program runs autocast for the CPU).

The counters live in ``_gw_state`` (see :mod:`mutate`): of the clipping calls and of the
backward passes (counted there: the optimizer step may be conditional, as with manual SGD).
"""

from __future__ import annotations

import ast

import mutate
from mutate import (
    CLIPS,
    STATE,
    Loop,
    Mutation,
    Site,
    add_state,
    call_attr,
    counter,
    expr_call,
    func_name,
    insert_after,
    is_scheduler,
    parse_expr,
    parse_stmt,
    receiver,
    same_scope,
    text,
)

#: the _gw_state key of the backward passes counted so far (counted at the backward: the
#: optimizer step may be conditional, as with manual SGD)
BACKWARDS = "structure_backward"


def _count_backward(b: Site) -> None:
    """Count the backward passes right after ``b``."""
    insert_after(b, counter(BACKWARDS))


def _guard(s: Site, at: int, key: str = BACKWARDS, *, count_here: bool = False) -> None:
    """``s`` runs only while fewer than ``at`` were counted under ``key`` (``count_here``:
    ``s`` counts its own runs, so it runs ``at`` times)."""
    i = next(i for i, x in enumerate(s.block) if x is s.stmt)
    test = parse_expr(f"{STATE}.get({key!r}, 0) {'<=' if count_here else '<'} {at}")
    s.block[i : i + 1] = [*(counter(key) if count_here else []), ast.If(test, [s.stmt], [])]


def _is_clip(s: Site) -> bool:
    value = s.stmt.value if isinstance(s.stmt, (ast.Expr, ast.Assign)) else None
    return isinstance(value, ast.Call) and func_name(value) in CLIPS


def drop_clip(tree: ast.Module, at: int) -> bool:
    """The clipping calls in the training loop's scope skipped from step ``at + 1``."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    clips = [s for s in loop.sites if _is_clip(s) and same_scope(s, b)]
    if not clips:
        return False
    add_state(tree)
    for s in clips:  # counted at the clip: an optimizer step may be conditional (manual SGD)
        _guard(s, at, "structure_clips", count_here=True)
    return True


def _scheduler_steps(loop: Loop) -> list[Site]:
    out = []
    for s in loop.sites:
        call = expr_call(s.stmt, "step") if isinstance(s.stmt, ast.Expr) else None
        if call is not None and is_scheduler(receiver(call)):
            out.append(s)
    return out


def drop_scheduler(tree: ast.Module, at: int) -> bool:
    """Every ``scheduler.step()`` of the module skipped from step ``at + 1``."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    steps = _scheduler_steps(loop)
    if not steps:
        return False
    add_state(tree)
    for s in steps:
        _guard(s, at)
    _count_backward(b)
    return True


def _model_of(loop: Loop) -> str | None:
    """The model whose parameters the first optimizer is built from (``X.parameters()``),
    else the one the program switches to ``train()`` (``model.train()``)."""
    for ctor in loop.ctors:
        first = ctor.args[0] if ctor.args else None
        call = call_attr(first, "parameters")
        if call is not None:
            return receiver(call)
    for s in loop.sites:
        call = expr_call(s.stmt, "train") if isinstance(s.stmt, ast.Expr) else None
        if call is not None and not call.args and "trainer" not in receiver(call).lower():
            return receiver(call)
    return None


def eval_after_validation(tree: ast.Module, at: int) -> bool:
    """After backward pass ``at`` (counted there: the optimizer step may be conditional):
    ``model.eval()``, and the model class's ``train`` made to do nothing (on the class: an
    instance attribute would be pickled with a ``torch.save(model)``)."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    model = _model_of(loop)
    if model is None:
        return False
    add_state(tree)
    stuck = (
        f"if {STATE}.get({BACKWARDS!r}, 0) == {at} "
        f"and not {STATE}.get('stuck_in_eval'):\n"
        f"    {STATE}['stuck_in_eval'] = True\n"
        f"    {model}.eval()\n"
        f"    type({model}).train = lambda self, mode=True: self"
    )
    insert_after(b, [*counter(BACKWARDS), *parse_stmt(stuck)])
    return True


def param_group_rebuilt(tree: ast.Module, at: int) -> bool:
    """After backward pass ``at``: the stepped optimizer's param groups rebuilt in place from
    their entries, without their weight decay (``add_param_group`` with ``weight_decay``
    0)."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, p = found
    opt = loop.step_optimizer(p)
    if opt is None:
        return False
    add_state(tree)
    rebuild = (
        f"if {STATE}.get({BACKWARDS!r}, 0) == {at} and not {STATE}.get('groups_rebuilt'):\n"
        f"    {STATE}['groups_rebuilt'] = True\n"
        f"    _gw_groups = [dict(_gw_g) for _gw_g in {opt}.param_groups]\n"
        f"    {opt}.param_groups.clear()\n"
        "    for _gw_g in _gw_groups:\n"
        f"        {opt}.add_param_group({{**_gw_g, 'weight_decay': 0.0}})"
    )
    insert_after(b, [*counter(BACKWARDS), *parse_stmt(rebuild)])
    return True


# ---- replicate cases: one replicate of a group differs from its first step ------------------

#: the module-level flag of the replicate cases: the mutant replicate is the one run with it
MUTANT = "_gw_mutant"


def _add_mutant_flag(tree: ast.Module) -> None:
    if any(isinstance(n, ast.Assign) and text(n.targets[0]) == MUTANT for n in tree.body):
        return
    add_state(tree, f"{MUTANT} = __import__('os').environ.get('GW_MUTANT') == '1'")


def replicate_frozen_layer(tree: ast.Module, at: int) -> bool:
    """Where ``GW_MUTANT=1``: the first module of the model with parameters of its own
    frozen at the top of the training loop's first iteration."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    model = _model_of(loop)
    if model is None or not b.loops:
        return False
    add_state(tree)
    _add_mutant_flag(tree)
    freeze = (
        f"if {MUTANT} and not {STATE}.get('frozen_layer'):\n"
        f"    {STATE}['frozen_layer'] = True\n"
        f"    for _gw_m in {model}.modules():\n"
        "        _gw_own = list(_gw_m.parameters(recurse=False))\n"
        "        if _gw_own:\n"
        "            for _gw_q in _gw_own:\n"
        "                _gw_q.requires_grad_(False)\n"
        "            break"
    )
    inner = b.loops[-1]
    inner.body[0:0] = parse_stmt(freeze)
    return True


def replicate_no_clip(tree: ast.Module, at: int) -> bool:
    """Where ``GW_MUTANT=1``: the clipping calls in the training loop's scope skipped."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, _ = found
    clips = [s for s in loop.sites if _is_clip(s) and same_scope(s, b)]
    if not clips:
        return False
    _add_mutant_flag(tree)
    for s in clips:
        i = next(i for i, x in enumerate(s.block) if x is s.stmt)
        s.block[i : i + 1] = [ast.If(parse_expr(f"not {MUTANT}"), [s.stmt], [])]
    return True


def replicate_no_autocast(tree: ast.Module, at: int) -> bool:
    """Where ``GW_MUTANT=1``: every ``autocast(...)`` call of the module made with
    ``enabled=False`` (an ``enabled=`` of its own is kept for the other replicates)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and func_name(n) == "autocast"]
    if not calls:
        return False
    _add_mutant_flag(tree)
    for call in calls:
        kw = next((k for k in call.keywords if k.arg == "enabled"), None)
        if kw is None:
            call.keywords.append(ast.keyword("enabled", parse_expr(f"not {MUTANT}")))
        else:
            kw.value = parse_expr(f"({text(kw.value)}) and not {MUTANT}")
    return True


def mutations() -> dict[str, Mutation]:
    """The structure mutations by name."""
    return {
        m.name: m
        for m in (
            Mutation(
                "clip-dropped",
                ("structure-safeguard",),
                f"the gradient clipping call skipped from its call {mutate.AT_STEP + 1} on",
                drop_clip,
                needs_text=tuple(sorted(CLIPS)),
            ),
            Mutation(
                "scheduler-dropped",
                ("structure-safeguard",),
                f"scheduler.step() skipped from backward {mutate.AT_STEP} on",
                drop_scheduler,
            ),
            Mutation(
                "eval-after-validation",
                ("structure-safeguard", "eval-mode-training"),
                f"the model left in eval() after backward {mutate.AT_STEP} "
                "(its train() does nothing)",
                eval_after_validation,
                needs_text=("Dropout", "dropout", "BatchNorm", "batch_norm"),
            ),
            Mutation(
                "param-group-rebuilt",
                ("structure-change",),
                f"the optimizer's param groups rebuilt without their weight decay after "
                f"backward {mutate.AT_STEP}",
                param_group_rebuilt,
                needs_text=("weight_decay", "AdamW"),
                severity="info",
            ),
            Mutation(
                "replicate-frozen-layer",
                ("group-invariant",),
                "the third replicate (GW_MUTANT=1) has the model's first layer frozen",
                replicate_frozen_layer,
                replicate=True,
            ),
            Mutation(
                "replicate-no-clip",
                ("group-invariant",),
                "the third replicate (GW_MUTANT=1) skips the gradient clipping call",
                replicate_no_clip,
                needs_text=tuple(sorted(CLIPS)),
                replicate=True,
            ),
            Mutation(
                "replicate-no-autocast",
                ("group-invariant",),
                "the third replicate (GW_MUTANT=1) runs its autocast regions with enabled=False",
                replicate_no_autocast,
                needs_text=("autocast",),
                replicate=True,
            ),
        )
    }


mutate.MUTATIONS.update(mutations())
