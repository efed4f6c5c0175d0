"""The facts the event walk produces: :class:`Event` and :class:`Guard`, and the small
syntactic tests they rest on (accumulation guards, loops over data)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from gradwatch.lint.kinds import Kind
from gradwatch.lint.source import text

BACKWARD, STEP, ZERO, EVAL, TRAIN = "backward", "step", "zero", "eval", "train"
CALL, SCHED_STEP, UPDATE, CLIP = "call", "sched_step", "update", "clip"

_ACCUM = re.compile(
    r"accum|need_update|should_step|sync_grad|update_grad|do_step|is_update|step_now|micro",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Guard:
    """An ``if`` test around an event; ``negated`` in its ``else`` branch."""

    test: str
    accum: bool
    negated: bool


@dataclass(frozen=True)
class Event:
    """One event; ``target`` is the receiver as the analysed code names it."""

    kind: str
    node: ast.AST
    depth: int
    target: str | None = None
    guards: tuple[Guard, ...] = ()
    branches: tuple[tuple[int, int], ...] = ()
    closure: bool = False
    managed: bool = False
    no_grad: bool = False
    via: str | None = None
    operand: ast.expr | None = None
    tkind: Kind | None = None
    args: tuple[str, ...] = ()
    loops: tuple[int, ...] = ()
    data_loop: bool = False
    of: str | None = None  # the collection the target is an item of (`for opt in opts`)

    @property
    def line(self) -> int:
        return int(getattr(self.node, "lineno", 0))

    @property
    def at(self) -> tuple[int, int]:
        """Where the event is in the source: (line, column), so that the statements of
        one line (``opt.zero_grad(); loss.backward(); opt.step()``) keep their order."""
        return self.line, int(getattr(self.node, "col_offset", 0))

    @property
    def accum_guarded(self) -> bool:
        return any(g.accum and not g.negated for g in self.guards)

    def exclusive(self, other: Event) -> bool:
        """Whether the two events sit in different branches of one ``if``."""
        mine = dict(self.branches)
        return any(mine.get(node, side) != side for node, side in other.branches)


def is_accum_guard(test: ast.expr) -> bool:
    """``(i + 1) % k == 0``, ``need_update``, ``accelerator.sync_gradients``, ..."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
        name = text(node)
        if isinstance(node, ast.Name | ast.Attribute) and name and _ACCUM.search(name):
            return True
    return False


def is_data_loop(s: ast.For | ast.AsyncFor) -> bool:
    """Whether a ``for`` iterates over data (not ``range(...)`` or a parameter list)."""
    for node in ast.walk(s.iter):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            name = text(node.func) or ""
            if name.rsplit(".", 1)[-1] in ("range", "parameters", "named_parameters", "count"):
                return False
    return not isinstance(s.iter, ast.Constant | ast.List | ast.Tuple)
