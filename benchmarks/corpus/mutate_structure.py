"""Structure changes mid-run (issue #41) as source mutations, registered in
:data:`mutate.MUTATIONS` beside the bug classes of :mod:`mutate`.

Each one changes how training is put together from optimizer step ``at`` on, the way a
resume path, a validation helper or a flag does, and leaves every step before it as it was:

- ``clip-dropped`` — the program's gradient clipping call is skipped from step ``at + 1``
  (a safeguard dropped; only programs that clip);
- ``scheduler-dropped`` — the program's ``scheduler.step()`` is skipped from step ``at + 1``
  (only programs with a scheduler);
- ``eval-after-validation`` — after step ``at`` the model is put in ``eval()`` and its
  ``train()`` does nothing any more: a validation that leaves the model in eval mode, with
  the program's own ``model.train()`` calls no longer restoring it (only models with
  dropout or batch norm).

The step counter lives in ``_gw_state`` (see :mod:`mutate`), counted just before the
optimizer's step.
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
    insert_before,
    is_scheduler,
    parse_expr,
    parse_stmt,
    receiver,
    same_scope,
)

STEPS = "structure_steps"  # the _gw_state key of the optimizer steps counted so far


def _count_steps(p: Site) -> None:
    """Count the optimizer steps just before ``p`` (once per program)."""
    insert_before(p, counter(STEPS))


def _guard(s: Site, at: int) -> None:
    """``s`` runs only while fewer than ``at`` optimizer steps were counted."""
    i = next(i for i, x in enumerate(s.block) if x is s.stmt)
    test = parse_expr(f"{STATE}.get({STEPS!r}, 0) < {at}")
    s.block[i] = ast.If(test=test, body=[s.stmt], orelse=[])


def _is_clip(s: Site) -> bool:
    value = s.stmt.value if isinstance(s.stmt, (ast.Expr, ast.Assign)) else None
    return isinstance(value, ast.Call) and func_name(value) in CLIPS


def drop_clip(tree: ast.Module, at: int) -> bool:
    """The clipping calls in the training loop's scope skipped from step ``at + 1``."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    b, p = found
    clips = [s for s in loop.sites if _is_clip(s) and same_scope(s, b)]
    if not clips:
        return False
    add_state(tree)
    for s in clips:
        _guard(s, at)
    _count_steps(p)
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
    _, p = found
    steps = _scheduler_steps(loop)
    if not steps:
        return False
    add_state(tree)
    for s in steps:
        _guard(s, at)
    _count_steps(p)
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
    """After step ``at``: ``model.eval()``, and ``model.train`` made to do nothing."""
    loop = Loop(tree)
    found = loop.first()
    if found is None:
        return False
    _, p = found
    model = _model_of(loop)
    if model is None:
        return False
    add_state(tree)
    stuck = (
        f"if {STATE}.get({STEPS!r}, 0) == {at} and not {STATE}.get('stuck_in_eval'):\n"
        f"    {STATE}['stuck_in_eval'] = True\n"
        f"    {model}.eval()\n"
        f"    {model}.train = lambda mode=True: {model}"
    )
    insert_after(p, parse_stmt(stuck))
    _count_steps(p)
    return True


def mutations() -> dict[str, Mutation]:
    """The structure mutations by name."""
    return {
        m.name: m
        for m in (
            Mutation(
                "clip-dropped",
                ("structure-safeguard",),
                f"the gradient clipping call skipped from optimizer step {mutate.AT_STEP + 1} on",
                drop_clip,
                needs_text=tuple(sorted(CLIPS)),
            ),
            Mutation(
                "scheduler-dropped",
                ("structure-safeguard",),
                f"scheduler.step() skipped from optimizer step {mutate.AT_STEP + 1} on",
                drop_scheduler,
            ),
            Mutation(
                "eval-after-validation",
                ("structure-safeguard", "eval-mode-training"),
                f"the model left in eval() after step {mutate.AT_STEP} (its train() does nothing)",
                eval_after_validation,
                needs_text=("Dropout", "dropout", "BatchNorm", "batch_norm"),
            ),
        )
    }


mutate.MUTATIONS.update(mutations())
