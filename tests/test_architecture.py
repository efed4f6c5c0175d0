"""The shape of the code (docs/architecture.md): no import cycle among the project's modules,
a small collector/ top level, and module names that say one thing.

The import graph is read with ``ast``, not by importing: every ``import`` / ``from ... import``
at module level counts, those under ``if TYPE_CHECKING:`` (and any other module-level
``if``/``try``) included; imports inside a function or method body are ignored (they are how
the collector keeps torch, http.client and pandas off ``import gradwatch``, never a way
around a cycle). An import of a package counts as an edge to its ``__init__``; the implicit
import of parent packages does not.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the top folders; below each, a module's path is its import name (pyproject's packages.find)
TREES = ("collector", "server", "dashboard")
#: plain modules allowed directly in collector/ (issue 21: at most 12)
MAX_TOP_LEVEL = 12
#: parallel trees: one module per resource in each, so their modules may share basenames
#: with each other and with the module of the resource they serve (e.g. commands/compare.py
#: and drift/verdict.py's CLI; checks/ddp.py and the ddp/ package)
PARALLEL = {
    "gradwatch.commands",
    "gradwatch.checks",
    "gradwatch.lint.rules",
    "gradwatch_server.api.routes",
    "gradwatch_dashboard.pages",
}
#: the server's folders by role (docs/architecture.md) -> the other role folders each may
#: import; every folder may import the flat shared modules at the top of gradwatch_server
SERVER_ROLES: dict[str, set[str]] = {
    "ingest": {"alerts"},  # ingest raises alerts as it stores findings; never the read side
    "drift": {"read", "alerts"},
    "read": set(),
    "alerts": set(),
    "guards": set(),
}
#: flat server modules that wire the roles together: no role folder imports them
SERVER_WIRING = ("app", "cli_actions", "monitor", "api")
#: the only modules that import the routes (besides the routes themselves)
ROUTES_USERS = {"gradwatch_server.app"}
#: the same role in two parallel trees, named once here: the catalogue of the run-time checks
#: (gradwatch.catalogue) and that of the static lint rules that mirror them
SAME_ROLE = {"catalogue": {"gradwatch.catalogue", "gradwatch.lint.catalogue"}}


def _module_name(path: Path) -> str:
    for folder in TREES:
        base = ROOT / folder
        if path.is_relative_to(base):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    raise AssertionError(path)


def _sources() -> dict[str, Path]:
    found = {}
    for folder in TREES:
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in path.parts or "migrations" in path.parts:
                continue
            found[_module_name(path)] = path
    return found


def _module_level(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements outside function bodies (module level, ``if``/``try`` blocks and
    class bodies included)."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        else:
            todo.extend(ast.iter_child_nodes(node))
    return out


def _every_import(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, those inside function bodies included."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def import_graph(in_functions: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports at module level (``in_functions``: inside
    function bodies as well)."""
    sources = _sources()
    reader = _every_import if in_functions else _module_level
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in sources.items():
        is_package = path.name == "__init__.py"
        for node in reader(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in sources else base
                    for alias in node.names
                ]
            graph[name].update(t for t in targets if t in sources and t != name)
        graph.setdefault(name, set())
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_reader_sees_type_checking_imports_and_skips_function_bodies() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import a\n"
        "def f():\n    import b\n"
        "class C:\n    import c\n"
    )
    assert sorted(n.names[0].name for n in _module_level(tree)) == ["TYPE_CHECKING", "a", "c"]
    assert cycles({"x": {"y"}, "y": {"x"}, "z": {"x"}}) == [["x", "y"]]


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert "gradwatch.session.handle" in graph  # the reader found the tree
    assert cycles(graph) == []


def test_collector_top_level_is_small() -> None:
    plain = sorted(
        p.name
        for p in (ROOT / "collector" / "gradwatch").glob("*.py")
        if p.name not in {"__init__.py"}
    )
    assert len(plain) <= MAX_TOP_LEVEL, plain


def test_no_two_modules_share_a_name_outside_parallel_trees() -> None:
    by_basename: dict[str, list[str]] = defaultdict(list)
    for name, path in _sources().items():
        if path.name == "__init__.py":
            continue
        by_basename[path.stem].append(name)
    clashes = {}
    for base, names in by_basename.items():
        if base == "__main__" or set(names) == SAME_ROLE.get(base):
            continue  # `python -m` entry points: the name is the protocol
        outside = [n for n in names if n.rsplit(".", 1)[0] not in PARALLEL]
        if len(names) > 1 and len(outside) > 1:
            clashes[base] = sorted(names)
    assert clashes == {}


def _server_part(module: str) -> str | None:
    """The first name below ``gradwatch_server`` (a role folder, a flat module, ``api``)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "gradwatch_server" and len(parts) > 1 else None


def server_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports that break the server's folder rules: a role folder importing a role folder
    it may not (ingest -> read above all) or the wiring (app, cli_actions, monitor, api),
    and any module but ``app`` and the routes importing ``gradwatch_server.api.routes``."""
    found = []
    for module, targets in sorted(graph.items()):
        role = _server_part(module)
        for target in sorted(targets):
            if target.startswith("gradwatch_server.api.routes") and not (
                module in ROUTES_USERS or module.startswith("gradwatch_server.api.routes")
            ):
                found.append(f"{module} -> {target}: only app.py mounts the routes")
            into = _server_part(target)
            if role not in SERVER_ROLES or into is None or into == role:
                continue
            if into in SERVER_ROLES and into not in SERVER_ROLES[role]:
                found.append(f"{module} -> {target}: {role}/ may not import {into}/")
            elif into in SERVER_WIRING:
                found.append(f"{module} -> {target}: {role}/ may not import the wiring")
    return found


def test_the_server_rules_fail_on_a_violation() -> None:
    bad = {
        "gradwatch_server.ingest.frame_rows": {"gradwatch_server.read.series"},
        "gradwatch_server.alerts.rules": {"gradwatch_server.monitor"},
        "gradwatch_server.read.runs": {"gradwatch_server.api.routes.runs"},
        "gradwatch_server.drift.live": {"gradwatch_server.read.runs", "gradwatch_server.db"},
        "gradwatch_server.app": {"gradwatch_server.api.routes"},
    }
    assert server_violations(bad) == [
        "gradwatch_server.alerts.rules -> gradwatch_server.monitor: alerts/ may not import "
        "the wiring",
        "gradwatch_server.ingest.frame_rows -> gradwatch_server.read.series: ingest/ may not "
        "import read/",
        "gradwatch_server.read.runs -> gradwatch_server.api.routes.runs: only app.py mounts "
        "the routes",
        "gradwatch_server.read.runs -> gradwatch_server.api.routes.runs: read/ may not import "
        "the wiring",
    ]


def test_server_folders_import_in_one_direction() -> None:
    """Imports inside functions count too: a lazy import is still an arrow."""
    graph = import_graph(in_functions=True)
    assert "gradwatch_server.ingest.frame_store" in graph  # the reader found the folders
    assert server_violations(graph) == []


#: the run handle, and the package whose modules alone may read its private members
RUN_MODULE, RUN_CLASS, RUN_OWNER = "gradwatch.session.handle", "Run", "gradwatch.session"
#: names that hold a run (or, before issue 43, the run as its hooks' owner) in the codebase
RUN_HOLDERS = {"run", "owner", "_run", "handle"}


def run_private_members(tree: ast.Module) -> set[str]:
    """The private members of ``Run`` in its module: its ``_x`` methods and properties and
    every ``self._x`` it assigns (sunder names such as ``_repr_html_`` are protocols)."""
    members: set[str] = set()
    for cls in ast.walk(tree):
        if not (isinstance(cls, ast.ClassDef) and cls.name == RUN_CLASS):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("_"):
                members.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                members.add(node.attr)
    return {m for m in members if m.startswith("_") and not m.endswith("_")}


def _holder(node: ast.expr) -> str | None:
    """``run`` for ``run``, ``self.run``, ``w.run``; None for anything else."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return name if name in RUN_HOLDERS else None


def private_reaches(tree: ast.Module, members: set[str]) -> list[tuple[int, str]]:
    """``(line, member)`` of every read or write of a private member of ``Run`` through a
    name that holds a run, anywhere in the module (function bodies included), and of every
    ``getattr``/``setattr``/``hasattr`` of one by its name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in members and _holder(node.value):
            found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and len(node.args) >= 2
            and _holder(node.args[0])
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in members
        ):
            found.append((node.lineno, str(node.args[1].value)))
    return sorted(found)


def test_the_run_reach_rule_fails_on_a_reach() -> None:
    handle = ast.parse("class Run:\n def __init__(self):\n  self._io = 1\n def _guard(self): ...")
    members = run_private_members(handle)
    assert members == {"_io", "_guard"}
    hook = ast.parse(
        "def f(run, w):\n"
        "    run._io.submit()\n"  # a reach, in a function body
        "    w.run._guard(g, 'x')\n"  # through an attribute that holds the run
        "    getattr(self.owner, '_io')\n"  # by name
        "    run.io.submit(); self._io = 2; run._repr_html_()\n"  # public, own, protocol
    )
    assert private_reaches(hook, members) == [(2, "_io"), (3, "_guard"), (4, "_io")]


def test_nothing_outside_the_session_reaches_into_run() -> None:
    """The hooks, NaN provenance, the cross-rank checks and the display see the run through
    its public context (gradwatch.session.run_context.RunContext), never its private members."""
    sources = _sources()
    members = run_private_members(ast.parse(sources[RUN_MODULE].read_text(encoding="utf-8")))
    assert {"_io", "_guard", "_watches", "_report_once"} <= members  # the rule reads Run
    reaches = [
        f"{name}:{line} {member}"
        for name, path in sorted(sources.items())
        if not (name == RUN_OWNER or name.startswith(RUN_OWNER + "."))
        for line, member in private_reaches(ast.parse(path.read_text(encoding="utf-8")), members)
    ]
    assert reaches == []
