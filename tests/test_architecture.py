"""The shape of the code (docs/architecture.md), enforced from one declaration,
``tests/layers.py``: the collector's layers, what the server and the dashboard may import
of the collector, the server's role folders, the one HTTP client and the one record
decoder.

The import graph is read with ``ast``, not by importing. Every ``import`` / ``from ...
import`` counts, at module level (those under ``if TYPE_CHECKING:`` included) and inside
function bodies (how the collector keeps torch, http.client and pandas off ``import
gradwatch``; a lazy import is still an arrow). An import of a package counts as an edge to
its ``__init__``; the implicit import of parent packages does not.

What the code does not meet yet is listed below as known exceptions (``KNOWN_*``): a
test fails when one is added, and when one is gone (so the list only shrinks).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from gradwatch.core import checkids
from gradwatch.core.checks import REGISTRY
from gradwatch.core.lint_catalogue import IDS as LINT_IDS
from tests.layers import (
    COLLECTOR_LAYERS,
    HTTP_CLIENTS,
    RECORD_DECODERS,
    SERVER_ROLES,
    SHARED_CORE,
)

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
    "gradwatch.core.checks",
    "gradwatch.lint.rules",
    "gradwatch_server.api.routes",
    "gradwatch_dashboard.pages",
}
#: flat server modules that wire the roles together: no role folder imports them
SERVER_WIRING = ("app", "cli_actions", "monitor", "api")
#: the only modules that import the routes (besides the routes themselves)
ROUTES_USERS = {"gradwatch_server.app"}


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


#: imports inside functions that close a cycle today (session/, hooks/ and the display:
#: issue 43's run context removes them); no other import may close one
KNOWN_LAZY_BACK_EDGES: set[tuple[str, str]] = {
    ("gradwatch.session.handle", "gradwatch.analysis.display"),
    ("gradwatch.analysis.rundata", "gradwatch.analysis.display"),
    ("gradwatch.hooks.connectivity", "gradwatch.session.autowatch"),
    ("gradwatch.session.attach", "gradwatch.session.autowatch"),
}


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert "gradwatch.session.handle" in graph  # the reader found the tree
    assert cycles(graph) == []


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    graph = import_graph(in_functions=True)
    assert {(a, b) for a, b in KNOWN_LAZY_BACK_EDGES if b in graph[a]} == KNOWN_LAZY_BACK_EDGES
    for a, b in KNOWN_LAZY_BACK_EDGES:
        graph[a].discard(b)
    assert cycles(graph) == []


def _layer_of(module: str) -> int | None:
    """The index of the collector layer ``module`` belongs to (longest listed package; the
    top package ``gradwatch`` stands for its ``__init__`` only)."""
    best: tuple[int, int] | None = None
    for i, packages in enumerate(COLLECTOR_LAYERS.values()):
        for package in packages:
            inside = "." in package and module.startswith(package + ".")  # "gradwatch": itself
            if (module == package or inside) and (best is None or len(package) > best[1]):
                best = (i, len(package))
    return None if best is None else best[0]


def _in(module: str, packages: tuple[str, ...] | str) -> bool:
    packages = (packages,) if isinstance(packages, str) else packages
    return any(module == p or module.startswith(p + ".") for p in packages)


#: the server's one entry point for the collector's commands (serve, demo, runs, ...)
SERVER_ENTRY = "gradwatch_server.cli_actions"
#: imports that break the layers today (issue 43: the run context and the server entry
#: point remove them); no other may be added
KNOWN_LAYER_VIOLATIONS: set[str] = {
    "gradwatch.fingerprint.provenance -> gradwatch.session.quietproc",
    "gradwatch.fingerprint.take -> gradwatch.session.quietproc",
    "gradwatch.fingerprint.take -> gradwatch.stats.hostnorms",
    "gradwatch.hooks.connectivity -> gradwatch.session.autowatch",
    "gradwatch.hooks.context -> gradwatch.session.options",
    "gradwatch.hooks.model -> gradwatch.session.portable",
    "gradwatch.hooks.module_runs -> gradwatch.session.portable",
    "gradwatch.hooks.outermost -> gradwatch.session.portable",
    "gradwatch.session.handle -> gradwatch.analysis.display",
    "gradwatch.stats.hostnorms -> gradwatch.session.quietproc",
    "gradwatch.transport.record_builder -> gradwatch.checks.view",
    "gradwatch.transport.record_builder -> gradwatch.stats.batch_checksum",
    "gradwatch.transport.record_builder -> gradwatch.stats.rows",
    "gradwatch.transport.writer -> gradwatch.stats.intraop",
}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports against ``tests/layers.py``: a collector module importing a higher layer or
    the server (other than its one entry point, from the public surface), a server or
    dashboard module importing the collector outside ``SHARED_CORE``, and a module of the
    collector that no layer lists."""
    found = []
    for module, targets in sorted(graph.items()):
        if module.startswith(("gradwatch_server", "gradwatch_dashboard")):
            found += [
                f"{module} -> {t}"
                for t in sorted(targets)
                if _in(t, "gradwatch") and not _in(t, SHARED_CORE)
            ]
            continue
        here = _layer_of(module)
        if here is None:
            found.append(f"{module}: in no layer of tests/layers.py")
            continue
        for target in sorted(targets):
            if target.startswith(("gradwatch_server", "gradwatch_dashboard")):
                if not (_in(target, SERVER_ENTRY) and here == 0):
                    found.append(f"{module} -> {target}")
                continue
            there = _layer_of(target)
            if there is not None and there < here:
                found.append(f"{module} -> {target}")
    return found


def test_the_layer_rule_fails_on_a_violation() -> None:
    bad = {
        "gradwatch.stats.tensors": {"gradwatch.hooks.model", "gradwatch.core.wire"},
        "gradwatch.hooks.model": {"gradwatch.stats.tensors", "gradwatch.nan.origin"},
        "gradwatch_server.read.series": {"gradwatch.analysis.selection", "gradwatch.core"},
        "gradwatch.commands.runs": {"gradwatch_server.cli_actions", "gradwatch_server.db"},
        "gradwatch.transport.writer": {"gradwatch_server.cli_actions"},
        "gradwatch.newpkg.x": set(),
    }
    assert layer_violations(bad) == [
        "gradwatch.commands.runs -> gradwatch_server.db",
        "gradwatch.hooks.model -> gradwatch.nan.origin",
        "gradwatch.newpkg.x: in no layer of tests/layers.py",
        "gradwatch.stats.tensors -> gradwatch.hooks.model",
        "gradwatch.transport.writer -> gradwatch_server.cli_actions",
        "gradwatch_server.read.series -> gradwatch.analysis.selection",
    ]


def test_modules_import_only_their_layer_or_lower() -> None:
    """Imports inside functions count. The server and the dashboard import only
    ``gradwatch.core`` of the collector; the collector reaches the server only through
    ``gradwatch_server.cli_actions``, from its commands."""
    found = set(layer_violations(import_graph(in_functions=True)))
    assert sorted(found - KNOWN_LAYER_VIOLATIONS) == []
    assert sorted(KNOWN_LAYER_VIOLATIONS - found) == []  # fixed: take it off the list


def _imports_of(tree: ast.Module) -> set[str]:
    """Every module name an import statement names (standard library included)."""
    out: set[str] = set()
    for node in _every_import(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif node.module and not node.level:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_one_http_client() -> None:
    """Only the modules of ``HTTP_CLIENTS`` open HTTP connections: every read of a server
    goes through ``gradwatch.core.client.Api`` (one rule for timeouts, errors, NaN and
    pages)."""
    speaking = {
        name
        for name, path in _sources().items()
        if _imports_of(ast.parse(path.read_text(encoding="utf-8")))
        & {"urllib.request", "http.client"}
    }
    assert "gradwatch.core.client" in speaking
    assert sorted(speaking - HTTP_CLIENTS) == []


def _kind_tests(tree: ast.Module) -> int:
    """Comparisons of something with a ``Kind.X`` (or a set, tuple or list of them): how
    code decides what a record it read means."""

    def is_kind(node: ast.AST) -> bool:
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            return any(is_kind(e) for e in node.elts)
        return (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "Kind"
        )

    return sum(
        isinstance(n, ast.Compare) and any(is_kind(p) for p in (n.left, *n.comparators))
        for n in ast.walk(tree)
    )


def test_one_record_decoder() -> None:
    """Only the modules of ``RECORD_DECODERS`` test what kind a record is: every reader
    of spooled or stored records decodes them with ``gradwatch.core.records.decode``."""
    assert _kind_tests(ast.parse("if rec.kind in (Kind.STEPS, Kind.END): pass")) == 1
    deciding = {
        name
        for name, path in _sources().items()
        if _kind_tests(ast.parse(path.read_text(encoding="utf-8")))
    }
    assert "gradwatch.core.records" in deciding
    assert sorted(deciding - RECORD_DECODERS) == []


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
        if base == "__main__":
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


def test_the_docs_show_the_one_declaration_of_the_layers() -> None:
    source = (ROOT / "tests" / "layers.py").read_text(encoding="utf-8")
    begin, end = "# --- layers: begin", "# --- layers: end ---"
    block = source[source.index(begin) : source.index(end) + len(end)]
    assert block in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


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


# -- the check registry ---------------------------------------------------------------------
#: the package whose modules declare the check families, one module per family
FAMILY_PACKAGE = "gradwatch.core.checks"
#: methods and functions whose first argument (or ``check=`` / ``clear=``) is a check id
ID_TAKERS = {
    "finding",
    "clear",
    "episode",
    "settle",
    "active",
    "enabled",
    "on",
    "wants_action",
    "emit",
    "policy",
}
#: strings spelled like a check id that name something else: (module, string) -> what it is
NOT_CHECK_IDS = {
    ("gradwatch.demo.training", "stale-grad"): "the demo run that shows the bug",
    ("gradwatch.commands.demo", "stale-grad"): "the demo run that shows the bug",
}
_ID_SHAPE = re.compile(r"[a-z]+(-[a-z0-9]+)+")


def _docstrings(tree: ast.Module) -> set[int]:
    """``id()`` of every docstring node (a module's, class's or function's first string)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _is_check_field(node: ast.expr) -> bool:
    """``x.check``, ``x["check"]``, ``x.get("check")``: an expression that holds a check id."""
    if isinstance(node, ast.Attribute):
        return node.attr == "check"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "check"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "check"
    )


def _id_positions(tree: ast.Module) -> list[ast.Constant]:
    """String literals where a check id goes: the id argument of :data:`ID_TAKERS`, the value
    of a ``"check"`` key, what a check field is compared with."""
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ID_TAKERS and node.args:
                out.append(node.args[0])
            out += [k.value for k in node.keywords if k.arg in {"check", "clear"}]
        elif isinstance(node, ast.Dict):
            out += [
                v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == "check"
            ]
        elif isinstance(node, ast.Compare) and any(
            _is_check_field(p) for p in (node.left, *node.comparators)
        ):
            for part in (node.left, *node.comparators):
                elts = part.elts if isinstance(part, ast.Tuple | ast.Set | ast.List) else [part]
                out += elts
    return [n for n in out if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def check_id_uses(
    tree: ast.Module, module: str, declared: set[str], lint_ids: set[str]
) -> list[str]:
    """``line: what`` of every use of a check id the rules forbid: a string literal of a
    declared id (use its constant, ``gradwatch.core.checkids``), a literal in a check-id
    position that no registry declares (a runtime check or a lint rule), and a
    ``checkids.X`` that is no constant there."""
    found: list[str] = []
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in declared and id(node) not in docs:
            if (module, node.value) not in NOT_CHECK_IDS:
                found.append(f"{node.lineno}: {node.value!r} (use its constant)")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "checkids"
            and node.attr.isupper()
            and not hasattr(checkids, node.attr)
        ):
            found.append(f"{node.lineno}: checkids.{node.attr} (not declared)")
    for node in _id_positions(tree):
        if _ID_SHAPE.fullmatch(node.value) and node.value not in declared | lint_ids:
            found.append(f"{node.lineno}: {node.value!r} (not declared)")
    return sorted(set(found))


def family_declarations(tree: ast.Module) -> tuple[set[str], int]:
    """The check ids a module assigns to constants (``X: Final = "x-y"``), and how many
    ``Check(...)`` / ``Family(...)`` calls it makes."""
    ids: set[str] = set()
    calls = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Constant):
            value = node.value.value
            if isinstance(value, str) and _ID_SHAPE.fullmatch(value):
                ids.add(value)
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            calls += name in {"Check", "Family"}
    return ids, calls


def test_the_check_id_rule_fails_on_a_violation() -> None:
    code = ast.parse(
        '"""Docstring: sink.finding("stale-grad") is fine here."""\n'
        "def f(sink, f):\n"
        '    sink.finding("stale-grad", 1)\n'  # a declared id spelled out
        '    sink.enabled("stale-grd")\n'  # an id no registry declares
        '    if f.get("check") == "loss-detatched": pass\n'  # compared with a check field
        "    checkids.STALE_GRD\n"  # no such constant
        "    sink.finding(checkids.STALE_GRAD, 1); sink.on('loss-detached')\n"  # fine
    )
    assert check_id_uses(code, "m", {"stale-grad"}, {"loss-detached"}) == [
        "3: 'stale-grad' (use its constant)",
        "4: 'stale-grd' (not declared)",
        "5: 'loss-detatched' (not declared)",
        "6: checkids.STALE_GRD (not declared)",
    ]


def test_check_ids_are_the_registrys_constants() -> None:
    """Code names a check by its registry constant, never by a string, and every id it uses
    is declared (a runtime check of the registry, or a rule of the lint catalogue)."""
    declared = set(REGISTRY.by_id)
    lint_ids = set(LINT_IDS)
    found = [
        f"{name}:{where}"
        for name, path in sorted(_sources().items())
        if not name.startswith(FAMILY_PACKAGE + ".")
        for where in check_id_uses(
            ast.parse(path.read_text(encoding="utf-8")), name, declared, lint_ids
        )
    ]
    assert found == []


def test_the_family_rule_fails_on_a_check_declared_elsewhere() -> None:
    ids, calls = family_declarations(
        ast.parse('X: Final = "x-y"\nF = Family(__name__, "S", (Check(X, "info", "read"),))')
    )
    assert (ids, calls) == ({"x-y"}, 2)


def test_each_family_declares_its_checks_in_its_own_module() -> None:
    """Every check is declared, with its id constant, by its family's module (and only
    there): a ``Check``/``Family`` outside ``gradwatch.core.checks`` fails, as does a family
    whose constants and checks differ, or a module of the package that is no family."""
    sources = _sources()
    families = {f.module: f for f in REGISTRY.families}
    modules = sorted(n for n in sources if n.startswith(FAMILY_PACKAGE + "."))
    assert modules == sorted(families)  # every family module is registered, and only those
    for name, path in sorted(sources.items()):
        ids, calls = family_declarations(ast.parse(path.read_text(encoding="utf-8")))
        family = families.get(name)
        if family is None:
            outside = name not in {"gradwatch.core.registry", FAMILY_PACKAGE}
            assert not (outside and calls), f"{name} declares checks outside their family"
            continue
        assert ids == {c.id for c in family.checks}, name
        assert all(REGISTRY.family_of[c.id] == name for c in family.checks)
