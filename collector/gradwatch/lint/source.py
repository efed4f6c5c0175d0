"""One parsed file: its tree, import aliases, same-file functions and classes, and its
suppression comments."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

_SUPPRESS = re.compile(r"#\s*gradwatch:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)
ALL = "*"

#: Bases (qualified names) of classes whose training loop a framework owns.
LIGHTNING_BASES = ("LightningModule",)
HF_TRAINER_PREFIXES = ("transformers.",)
MODULE_BASES = ("torch.nn.Module", "torch.nn.modules.module.Module")


def text(node: ast.AST | None) -> str | None:
    """A dotted name for ``a``, ``a.b.c``, ``self.x`` (None for anything else)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


@dataclass
class Source:
    """A parsed Python file and what every rule needs to know about it."""

    path: str
    code: str
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    suppressions: dict[int, set[str]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, code: str, path: str = "<string>") -> Source:
        """Parse ``code``; raises ``SyntaxError`` (with the line) when it is not Python."""
        tree = ast.parse(code, filename=path)
        src = cls(path=path, code=code, tree=tree, lines=code.splitlines())
        src._index()
        return src

    @classmethod
    def read(cls, path: Path) -> Source:
        """Parse the file at ``path`` (its declared encoding honoured)."""
        with tokenize.open(path) as fh:
            code = fh.read()
        return cls.parse(code, str(path))

    def _index(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        self.imports[root] = root
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = stmt
        self._comments()

    def _comments(self) -> None:
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(self.code).readline))
        except (tokenize.TokenError, SyntaxError):
            return
        for tok in tokens:
            if tok.type != tokenize.COMMENT:
                continue
            m = _SUPPRESS.search(tok.string)
            if m is None:
                continue
            ids = {i.strip() for i in (m.group(1) or ALL).split(",") if i.strip()} or {ALL}
            self.suppressions.setdefault(tok.start[0], set()).update(ids)

    # -- names --------------------------------------------------------------------------------
    def qualname(self, node: ast.AST | None) -> str | None:
        """The imported name an expression refers to (``nn.Linear`` -> ``torch.nn.Linear``)."""
        dotted = text(node)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        base = self.imports.get(root)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def uses(self, *prefixes: str) -> bool:
        """Whether the file imports anything under one of ``prefixes``."""
        return any(q == p or q.startswith(p + ".") for q in self.imports.values() for p in prefixes)

    def base_names(self, cls: ast.ClassDef) -> list[str]:
        """The bases of ``cls`` as qualified names (same-file bases by their own name)."""
        out = []
        for base in cls.bases:
            out.append(self.qualname(base) or text(base) or "")
        return out

    def is_module_class(self, name: str, _seen: frozenset[str] = frozenset()) -> bool:
        """Whether the same-file class ``name`` subclasses ``torch.nn.Module``."""
        cls = self.classes.get(name)
        if cls is None or name in _seen:
            return False
        for base in self.base_names(cls):
            if base in MODULE_BASES or base.endswith(LIGHTNING_BASES):
                return True
            if base in self.classes and self.is_module_class(base, _seen | {name}):
                return True
        return False

    def framework_class(self, cls: ast.ClassDef) -> str | None:
        """``lightning`` or ``transformers`` when a framework runs the class's loop."""
        for base in self.base_names(cls):
            if base.endswith(LIGHTNING_BASES):
                return "lightning"
            if base.startswith(HF_TRAINER_PREFIXES):
                return "transformers"
        return None

    def suppressed(self, rule: str, lines: tuple[int, ...]) -> bool:
        """Whether a ``# gradwatch: ignore[...]`` comment on one of ``lines`` covers ``rule``."""
        for line in lines:
            ids = self.suppressions.get(line)
            if ids and (ALL in ids or rule in ids):
                return True
        return False

    def line_text(self, line: int) -> str:
        """The stripped source of one line (empty past the end)."""
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
