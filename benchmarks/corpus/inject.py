"""The bug injector: each bug class of `mutate.py` applied to each corpus program, run under
`gradwatch run`, and whether gradwatch named it.

Per (program, bug class): the program's tree is materialised (`materialize.py`), copied,
its script (for model-level classes: else the first local module it imports where the
class applies) mutated in place, and launched with gradwatch (`launch.py`). A class that
does not apply to a program (no scheduler to misplace, no ModuleList) is recorded as not
applicable and not counted. A case is **caught** when a runtime warning or error of one of
the class's expected checks was stored; **incidents** counts the distinct incidents of
the run's runtime warnings and errors; **root_first** says whether the first of them (by
step) is a cause of an expected check; **gradwatch** is the build it ran with (the short
commit, ``+dirty`` with uncommitted collector changes), so cases recorded before a check
changed can be found and run again.

    python benchmarks/corpus/inject.py [--only NAME [--exact]] [--classes a,b] [--out PATH] [--list]
    python benchmarks/corpus/inject.py --report    # judge the stored cases again, rewrite .md
    python benchmarks/corpus/inject.py --prune     # drop cases of programs no longer listed

Results merge into ``--out`` (default ``benchmarks/results/injection.json``; a case run
again replaces its entry) and ``injection.md`` next to it (catch rate by class and by
program, and the misses with what gradwatch said instead).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.append(str(ROOT / "collector"))
import mutate  # noqa: E402

from gradwatch.core.catalogue import CHECKS  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / "results" / "injection.json"
ALARM = ("warning", "error")
KEPT = ("check", "severity", "step", "role", "incident", "source")


# ---------------------------------------------------------------- mutating a tree


def local_modules(script: Path, roots: Iterable[Path]) -> list[Path]:
    """The repository's own modules ``script`` imports (``import model``,
    ``from models.net import Net``), in import order."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    found: list[Path] = []
    for name in names:
        rel = Path(*name.split("."))
        for root in roots:
            for cand in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                if cand.is_file() and cand.resolve() != script.resolve() and cand not in found:
                    found.append(cand)
    return found


def mutate_tree(
    tree: Path, script_rel: str, bug_class: str, at_step: int, cwd_rel: str = ""
) -> Path | None:
    """Apply ``bug_class`` in ``tree`` (in place); the file it changed, or None when it does
    not apply (nor, for model-level classes, to a local module the script imports)."""
    m = mutate.MUTATIONS[bug_class]
    script = tree / script_rel
    files = [script]
    if m.scope == "model":
        files += local_modules(script, dict.fromkeys([script.parent, tree / cwd_rel, tree]))
    if m.needs_text:
        sources = "".join(f.read_text(encoding="utf-8", errors="replace") for f in files)
        if not any(t in sources for t in m.needs_text):
            return None
    for f in files:
        out = mutate.apply(f.read_text(encoding="utf-8", errors="replace"), bug_class,
                           at_step=at_step)  # fmt: skip
        if out is not None:
            f.write_text(out, encoding="utf-8")
            return f
    return None


# ---------------------------------------------------------------- judging a run


def read_findings(data_dir: Path) -> list[dict[str, Any]]:
    """Every field of the findings (incident and role too) of the runs in ``data_dir``."""
    cmd = [sys.executable, "-m", "gradwatch", "findings", "--json", "--data-dir", str(data_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "collector")}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    try:
        found: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        return []
    return found


def _step(f: dict[str, Any]) -> tuple[bool, int]:
    step = f.get("step")
    return step is None, step if isinstance(step, int) else 0


def judge(
    expected: tuple[str, ...], findings: list[dict[str, Any]], severity: str = "warning"
) -> dict[str, Any]:
    """Caught (a runtime warning/error of an expected check; with ``severity`` "info" an
    info finding of one counts too: a structure change is an event by design), its check
    and step, the number of warning/error incidents, and whether the first incident's
    cause is expected."""
    runtime = [f for f in findings if f.get("source") != "lint"]
    alarms = sorted((f for f in runtime if f.get("severity") in ALARM), key=_step)
    levels = ("info", *ALARM) if severity == "info" else ALARM
    hits = sorted(
        (f for f in runtime if f.get("check") in expected and f.get("severity") in levels),
        key=_step,
    )
    noted = [f for f in hits if f.get("severity") not in ALARM]
    incidents: dict[str, dict[str, Any]] = {}
    for f in alarms:
        key = str(f.get("incident") or f"{f.get('check')}@{f.get('step')}")
        incidents.setdefault(key, f)
    causes = [f for f in alarms if f.get("role", "cause") == "cause"]
    # the root cause first: an expected check among the causes of the earliest step with one
    # (findings of one step have no order between them)
    first = [f for f in causes if _step(f) == _step(causes[0])] if causes else []
    lint = [f for f in findings if f.get("source") == "lint" and f.get("severity") in ALARM]
    return {
        "caught": bool(hits),
        "check": hits[0]["check"] if hits else None,
        "step": hits[0].get("step") if hits else None,
        "incidents": len(incidents),
        "root_first": any(f.get("check") in expected for f in first),
        "alarms": [
            {k: f.get(k) for k in ("check", "severity", "step", "role", "message")}
            for f in alarms[:6]
        ],
        "lint": sorted({str(f.get("check")) for f in lint}),
        # every warning/error, without messages: what --report judges again from
        "findings": [{k: f.get(k) for k in KEPT} for f in alarms + lint + noted],
    }


def rejudge(case: dict[str, Any]) -> dict[str, Any]:
    """A stored case judged again with the class's current expected checks (the judging
    rules may have changed since it ran; its findings have not)."""
    if not case.get("applicable", True):
        return case
    m = mutate.MUTATIONS[case["bug_class"]]
    expected = m.expected
    if "findings" not in case:  # a case from before findings were kept: its first 6 alarms
        shown = judge(expected, [{**a, "source": "runtime"} for a in case["alarms"]])
        caught = case["caught"] or shown["caught"]
        return {**case, "expected": list(expected), "caught": caught,
                "check": case["check"] or shown["check"], "step": case["step"] or shown["step"],
                "root_first": shown["root_first"]}  # fmt: skip
    fresh = judge(expected, case["findings"], m.severity)
    fresh["alarms"] = case["alarms"]  # with their messages, which findings lacks
    return {**case, "expected": list(expected), **fresh}


# ---------------------------------------------------------------- running


def build() -> str:
    """The gradwatch build a case runs with: the short commit of this checkout, ``+dirty``
    when the collector has uncommitted changes (a case re-run after a check changed can
    then be told from one recorded before)."""
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "collector"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return commit + ("+dirty" if dirty else "")


def at_step(program: Any) -> int:
    """The backward pass a mutation takes effect at: ``mutate.AT_STEP``, or a third of a
    short program's steps (at least 5)."""
    return min(mutate.AT_STEP, max(5, program.steps // 3))


def run_case(program: Any, bug_class: str, base_tree: Path) -> dict[str, Any]:
    import launch as launcher

    m = mutate.MUTATIONS[bug_class]
    at = at_step(program)
    row: dict[str, Any] = {"program": program.name, "bug_class": bug_class,
                           "expected": list(m.expected), "gradwatch": build()}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gw-inject-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(base_tree, tree, symlinks=True)
        changed = mutate_tree(tree, program.program, bug_class, at, program.workdir)
        if changed is None:
            return {**row, "applicable": False}
        data = Path(tmp) / "gw"
        t0 = time.perf_counter()
        seed = program.seeds[0]
        if m.replicate:  # two replicates without the flag first, then the mutant
            row["replicates"] = [
                launcher.launch(program, tree, seed=seed + k, gradwatch=True, data_dir=data)
                .returncode
                for k in range(2)
            ]  # fmt: skip
            program = dataclasses.replace(program, env=(*program.env, ("GW_MUTANT", "1")))
            seed += 2
        run = launcher.launch(program, tree, seed=seed, gradwatch=True, data_dir=data)
        findings = read_findings(data)  # the latest job's: the mutant's
        seconds = time.perf_counter() - t0
        verdict = judge(m.expected, findings, m.severity)
        failed = run.returncode != 0
        loud = inert = False
        if failed and not verdict["caught"]:
            # a mutant that stops with an exception is no silent bug, if it does so without
            # gradwatch too (torch itself said it): not counted (see summary)
            bare = launcher.launch(program, tree, seed=seed, gradwatch=False, data_dir=data)
            loud = bare.returncode != 0
        elif not verdict["caught"] and not m.replicate and run.digest:
            # a mutant that trains exactly as the program does changed nothing (a learning
            # rate the loop overwrites every batch, a NaN whose sign() is 0): not counted
            inert = run.digest == reference_digest(program, base_tree, seed, Path(tmp))
    return {
        **row,
        "applicable": True,
        "file": str(changed.relative_to(tree)),
        "mutation": m.description,
        "at_step": 1 if m.replicate else at,
        **verdict,
        "returncode": run.returncode,
        "error": error_line(run.stderr) if failed else None,
        "loud": loud,
        "inert": inert,
        "optimizer_steps": run.steps,
        "seconds": round(seconds, 1),
    }


_REFERENCE: dict[tuple[str, int], str] = {}


def reference_digest(program: Any, base_tree: Path, seed: int, tmp: Path) -> str:
    """The digest (trained parameters and normalised output) of the unmutated program at
    ``seed``, without gradwatch (gradwatch leaves training alone: the corpus shows equal
    digests in both modes), run once per program and seed."""
    import launch as launcher

    key = (program.name, seed)
    if key not in _REFERENCE:
        run = launcher.launch(program, base_tree, seed=seed, gradwatch=False, data_dir=tmp / "ref")
        _REFERENCE[key] = run.digest if run.returncode == 0 else ""
    return _REFERENCE[key]


def missing_checks(bug_class: str) -> list[str]:
    """Expected check ids this build of gradwatch does not have (yet)."""
    return [c for c in mutate.MUTATIONS[bug_class].expected if c not in CHECKS]


def error_line(stderr: str) -> str | None:
    """The exception a failed program ended with (the last ``SomethingError: ...`` line),
    else its last line of stderr."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line)]
    return (raised or lines or [""])[-1][:300] or None


def summary(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """The rates over the pairs that ran: applicable, and not *loud* (the mutant stopped
    with an exception with and without gradwatch: torch reports that bug itself)."""
    applicable = [c for c in cases if c.get("applicable", True)]
    ran = [c for c in applicable if not c.get("loud") and not c.get("inert")]
    built = [c for c in ran if not missing_checks(c["bug_class"])]
    caught = [c for c in ran if c["caught"]]
    clean = [c for c in caught if c["incidents"] <= 2 and c["root_first"]]
    return {
        "pairs": len(ran),
        "classes": len({c["bug_class"] for c in ran}),
        "programs": len({c["program"] for c in ran}),
        "caught": len(caught),
        "caught_clean": len(clean),
        "catch_rate": round(len(caught) / len(ran), 3) if ran else None,
        "clean_rate": round(len(clean) / len(ran), 3) if ran else None,
        # the same over the classes whose expected checks this build has
        "pairs_with_checks": len(built),
        "caught_with_checks": sum(c["caught"] for c in built),
        "loud": sum(bool(c.get("loud")) for c in applicable),
        "inert": sum(bool(c.get("inert")) for c in applicable),
    }


def _rate(rows: list[dict[str, Any]]) -> str:
    caught = sum(r["caught"] for r in rows)
    clean = sum(r["caught"] and r["incidents"] <= 2 and r["root_first"] for r in rows)
    return f"{caught}/{len(rows)} ({100 * caught / len(rows):.0f} %) | {clean}/{len(rows)}"


def _invocations(command: str) -> str:
    runs = command.split("; then ")
    if len(runs) == 1:
        return f"`{command}`"
    return f"{len(runs)} invocations of `inject.py` (the json's `meta.command` lists them)"


def markdown(
    meta: dict[str, Any], cases: list[dict[str, Any]], skipped: list[dict[str, Any]]
) -> str:
    loud = [c for c in cases if c.get("applicable", True) and c.get("loud")]
    inert = [c for c in cases if c.get("applicable", True) and c.get("inert")]
    ran = [c for c in cases if c.get("applicable", True) and not c.get("loud")]
    ran = [c for c in ran if not c.get("inert")]
    s = summary(cases)
    lines = [
        "# Bug injection into the corpus",
        "",
        f"{_invocations(meta['command'])} on {meta['date']} ({meta['machine']}), "
        f"gradwatch {meta['commit']}.",
        "",
        f"{s['pairs']} (program, bug class) pairs over {s['classes']} classes and "
        f"{s['programs']} programs; caught by an expected check: {s['caught']} "
        f"({100 * (s['catch_rate'] or 0):.0f} %); of them with at most 2 warning/error "
        f"incidents and the root cause first: {s['caught_clean']}. "
        f"{len(skipped)} pairs were not applicable, {len(loud)} loud (the mutant stopped "
        "with an exception with and without gradwatch) and "
        f"{len(inert)} inert (the mutant trained exactly as the program does), not counted. "
        "Over the classes whose "
        f"expected checks this build has: {s['caught_with_checks']} of "
        f"{s['pairs_with_checks']} caught.",
        "",
        "Caught: a runtime warning or error of one of the class's expected checks. Clean: "
        "caught, at most 2 warning/error incidents, and the first incident's cause is an "
        "expected check.",
        "",
        "## By bug class",
        "",
        "| class | expected | caught | clean |",
        "|---|---|---|---|",
    ]
    for cls, m in mutate.MUTATIONS.items():
        rows = [c for c in ran if c["bug_class"] == cls]
        absent = missing_checks(cls)
        note = f" (not in this build: {', '.join(absent)})" if absent else ""
        if rows:
            lines.append(f"| `{cls}` | {', '.join(m.expected)}{note} | {_rate(rows)} |")
    lines += ["", "## By program", "", "| program | caught | clean |", "|---|---|---|"]
    for prog in sorted({c["program"] for c in ran}):
        rows = [c for c in ran if c["program"] == prog]
        lines.append(f"| {prog} | {_rate(rows)} |")
    misses = [c for c in ran if not c["caught"]]
    lines += ["", "## Misses", ""]
    if not misses:
        lines.append("None.")
    for c in misses:
        said = "; ".join(f"{a['check']}@{a['step']}" for a in c["alarms"]) or "no warning/error"
        exit_ = "" if c["returncode"] == 0 else f" (exit {c['returncode']}: {c.get('error')})"
        lines.append(f"- {c['program']} / `{c['bug_class']}`: {said}{exit_}")
    noisy = [c for c in ran if c["caught"] and not (c["incidents"] <= 2 and c["root_first"])]
    lines += ["", "## Caught, but not cleanly", ""]
    if not noisy:
        lines.append("None.")
    for c in noisy:
        said = "; ".join(f"{a['check']}@{a['step']}({a.get('role')})" for a in c["alarms"])
        lines.append(f"- {c['program']} / `{c['bug_class']}`: {c['incidents']} incidents: {said}")
    lines += ["", "## Loud (not counted)", ""]
    if not loud:
        lines.append("None.")
    for c in loud:
        lines.append(f"- {c['program']} / `{c['bug_class']}`: {c.get('error')}")
    lines += ["", "## Inert (not counted)", ""]
    if not inert:
        lines.append("None.")
    for c in inert:
        lines.append(f"- {c['program']} / `{c['bug_class']}`: {c.get('mutation')}")
    lines += ["", "## Not applicable", ""]
    by_prog: dict[str, list[str]] = {}
    for c in skipped:
        by_prog.setdefault(c["program"], []).append(c["bug_class"])
    for prog, classes in sorted(by_prog.items()):
        lines.append(f"- {prog}: {', '.join(classes)}")
    return "\n".join(lines) + "\n"


def write(out: Path, meta: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    ran = [c for c in cases if c.get("applicable", True)]
    skipped = [
        {"program": c["program"], "bug_class": c["bug_class"]}
        for c in cases
        if not c.get("applicable", True)
    ]
    body = {"meta": meta, "summary": summary(cases), "cases": ran, "not_applicable": skipped}
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, content in ((out, json.dumps(body, indent=1) + "\n"),
                          (out.with_suffix(".md"), markdown(meta, ran, skipped))):  # fmt: skip
        part = path.with_name(path.name + ".part")  # whole files even if stopped mid-write
        part.write_text(content)
        os.replace(part, path)


def earlier(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    data = json.loads(out.read_text())
    na = [{**c, "applicable": False} for c in data.get("not_applicable", [])]
    return [*data.get("cases", []), *na]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", action="append", default=[], help="programs whose name contains this")
    p.add_argument("--exact", action="store_true", help="--only names whole program names")
    p.add_argument("--classes", default="", help="comma-separated bug classes (default: all)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--list", action="store_true", help="which classes apply where; run nothing")
    p.add_argument("--report", action="store_true", help="rewrite the .md from --out; run nothing")
    p.add_argument(
        "--prune", action="store_true", help="drop cases of programs no longer in the corpus"
    )
    args = p.parse_args(argv)
    import spec

    if args.report or args.prune:
        data = json.loads(args.out.read_text())
        cases = [rejudge(c) for c in earlier(args.out)]
        if args.prune:
            listed = {prog.name for prog in spec.all_programs()}
            cases = [c for c in cases if c["program"] in listed]
        write(args.out, data["meta"], cases)
        return 0
    from materialize import materialize, tree_dir

    classes = [c for c in args.classes.split(",") if c] or list(mutate.MUTATIONS)
    unknown = sorted(set(classes) - set(mutate.MUTATIONS))
    if unknown:
        p.error(f"unknown classes {unknown}; known: {', '.join(mutate.MUTATIONS)}")
    programs = [
        prog
        for prog in spec.all_programs()
        if not args.only or any(s == prog.name if args.exact else s in prog.name for s in args.only)
    ]
    if not programs:
        p.error("no program matches --only")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    meta = {
        "command": " ".join(["python benchmarks/corpus/inject.py", *(argv or sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "commit": commit,
    }
    cases = earlier(args.out)
    if cases and not args.list:  # say which invocations made the kept cases
        meta["command"] = (
            f"{json.loads(args.out.read_text())['meta']['command']}; then {meta['command']}"
        )
    for prog in programs:
        base = materialize(prog, tree_dir(prog))
        for cls in classes:
            if args.list:
                with tempfile.TemporaryDirectory() as tmp:
                    tree = Path(tmp) / "t"
                    shutil.copytree(base, tree, symlinks=True)
                    f = mutate_tree(tree, prog.program, cls, mutate.AT_STEP, prog.workdir)
                print(f"{prog.name} / {cls}: {f.relative_to(tree) if f else 'not applicable'}")
                continue
            print(f"{prog.name} / {cls} ...", end=" ", flush=True)
            row = run_case(prog, cls, base)
            if not row["applicable"]:
                print("not applicable", flush=True)
            else:
                verdict = "caught" if row["caught"] else "MISSED"
                print(f"{verdict} {row['check'] or ''}@{row['step']} incidents={row['incidents']} "
                      f"root_first={row['root_first']} exit={row['returncode']} "
                      f"({row['seconds']} s)", flush=True)  # fmt: skip
            cases = [c for c in cases if (c["program"], c["bug_class"]) != (prog.name, cls)]
            cases.append(row)
            cases.sort(key=lambda c: (c["program"], list(mutate.MUTATIONS).index(c["bug_class"])))
            write(args.out, meta, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
