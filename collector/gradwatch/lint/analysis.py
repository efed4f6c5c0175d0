"""The per-file analysis every rule reads: units (the module's own code, each function and
method), their scopes, their loops and the events of each, and where findings go."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from gradwatch.core.contract import Severity
from gradwatch.core.lint_catalogue import BY_ID
from gradwatch.lint.events import EventCollector
from gradwatch.lint.facts import Event
from gradwatch.lint.kinds import Scope, class_scope, function_scope, module_scope, own_nodes
from gradwatch.lint.result import Confidence, LintFinding, fingerprint
from gradwatch.lint.source import Source, text

Loop = ast.For | ast.AsyncFor | ast.While
Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Unit:
    """A block analysed on its own: the module's top-level code, or one function."""

    name: str
    node: ast.Module | Function
    body: list[ast.stmt]
    scope: Scope
    framework: str | None = None
    no_grad: bool = False
    loops: list[Loop] = field(default_factory=list)
    virtual_loop: bool = False  # a framework calls it once per batch (manual Lightning)

    @property
    def is_module(self) -> bool:
        return isinstance(self.node, ast.Module)


class Analysis:
    """Everything known about one file, and the findings reported on it."""

    def __init__(self, src: Source, enabled: set[str], selected: set[str] | None = None) -> None:
        self.src = src
        self.enabled = enabled
        self.selected = selected or set()
        self.module = module_scope(src)
        self.cls_scopes = {
            name: class_scope(src, cls, self.module) for name, cls in src.classes.items()
        }
        self.collector = EventCollector(src, self.module, self.cls_scopes)
        self.units = self._units()
        self.findings: dict[tuple[str, int, int], LintFinding] = {}
        self._events: dict[int, list[Event]] = {}
        self._loop_spans = [
            (n.lineno, n.end_lineno or n.lineno)
            for n in ast.walk(src.tree)
            if isinstance(n, ast.For | ast.AsyncFor | ast.While)
        ]

    # -- units --------------------------------------------------------------------------------
    def _units(self) -> list[Unit]:
        src = self.src
        top = [s for s in src.tree.body if not isinstance(s, ast.FunctionDef | ast.ClassDef)]
        units = [Unit("<module>", src.tree, top, self.module)]
        for fn in src.functions.values():
            units += self._function_units(fn, fn.name, self.module, None)
        for cls in src.classes.values():
            framework = src.framework_class(cls)
            if framework == "lightning" and _manual_optimization(cls):
                framework = "lightning-manual"
            for item in cls.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = f"{cls.name}.{item.name}"
                    units += self._function_units(item, name, self.cls_scopes[cls.name], framework)
        for unit in units:
            unit.loops = [n for n in own_nodes(unit.body) if isinstance(n, Loop)]
        return units

    def _function_units(
        self, fn: Function, name: str, parent: Scope, framework: str | None
    ) -> list[Unit]:
        scope = function_scope(self.src, fn, parent)
        no_grad = any(
            (self.src.qualname(d.func if isinstance(d, ast.Call) else d) or "").endswith(
                ("no_grad", "inference_mode")
            )
            for d in fn.decorator_list
        )
        unit = Unit(name, fn, fn.body, scope, framework, no_grad)
        if framework == "lightning-manual":
            unit.framework = None
            unit.virtual_loop = fn.name == "training_step"
        out = [unit]
        for node in own_nodes(fn.body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node is not fn:
                inner = function_scope(self.src, node, scope)
                out.append(Unit(f"{name}.{node.name}", node, node.body, inner, unit.framework))
        return out

    # -- events -------------------------------------------------------------------------------
    def events(self, unit: Unit, block: ast.AST | None = None) -> list[Event]:
        """The events of a loop of ``unit`` (or of the whole unit), cached."""
        key = id(block if block is not None else unit.node)
        if key not in self._events:
            body = block.body if isinstance(block, Loop) else unit.body
            no_grad = unit.no_grad or (block is not None and self.under_no_grad(unit, block))
            self._events[key] = self.collector.events(body, unit.scope, no_grad=no_grad)
        return self._events[key]

    def under_no_grad(self, unit: Unit, block: ast.AST) -> bool:
        for node in own_nodes(unit.body):
            if (
                isinstance(node, ast.With | ast.AsyncWith)
                and any(
                    (self.src.qualname(_callee(i.context_expr)) or "").endswith(
                        ("no_grad", "inference_mode")
                    )
                    for i in node.items
                )
                and any(n is block for n in ast.walk(node))
            ):
                return True
        return False

    def lifecycle_units(self) -> list[Unit]:
        """Units whose gradient lifecycle is the user's (not a framework's)."""
        return [u for u in self.units if u.framework is None]

    # -- findings -----------------------------------------------------------------------------
    def severity(self, rule: str) -> Severity:
        """A rule's default severity; an ``info`` rule the user selected by name (``--select
        unseeded-run``) reports warnings."""
        default = BY_ID[rule].severity
        return "warning" if default == "info" and rule in self.selected else default

    def emit(
        self,
        rule: str,
        node: ast.AST,
        message: str,
        unit: Unit,
        *,
        severity: Severity | None = None,
        confidence: Confidence = "high",
        loop: ast.AST | None = None,
    ) -> None:
        """Report ``rule`` at ``node`` (deduplicated by rule and position)."""
        if rule not in self.enabled:
            return
        line = int(getattr(node, "lineno", 1))
        col = int(getattr(node, "col_offset", 0)) + 1
        key = (rule, line, col)
        if key in self.findings:
            return
        end = int(getattr(node, "end_lineno", None) or line)
        lines = {*range(line, end + 1)}
        lines |= {start for start, stop in self._loop_spans if start <= line <= stop}
        if loop is not None:
            lines.add(int(getattr(loop, "lineno", line)))
        self.findings[key] = LintFinding(
            rule=rule,
            severity=severity or self.severity(rule),
            confidence=confidence,
            path=self.src.path,
            line=line,
            col=col,
            end_line=end,
            end_col=int(getattr(node, "end_col_offset", None) or 0) + 1,
            qualname=unit.name,
            message=message,
            fingerprint=fingerprint(rule, self.src.path, unit.name, self.src.line_text(line)),
            suppressed=self.src.suppressed(rule, tuple(sorted(lines))),
        )


def _callee(expr: ast.expr) -> ast.expr:
    return expr.func if isinstance(expr, ast.Call) else expr


def _manual_optimization(cls: ast.ClassDef) -> bool:
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Assign)
            and any(text(t) == "self.automatic_optimization" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and node.value.value is False
        ):
            return True
    return False
