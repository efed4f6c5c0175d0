"""`gradwatch lint` on the corpus's repositories, without running anything: its warnings
and errors on every Python file of every corpus project at its pinned commit (real code
that trains correctly, library code and helpers included), and which rule names each
bug the injector writes into the corpus programs (the source edit of `inject.py`, linted
instead of run).

    python benchmarks/corpus/lint_corpus.py                         # every file, every rule
    python benchmarks/corpus/lint_corpus.py --mutants clip-before-backward --out /tmp/l.json

The files come from the same local mirrors `materialize.py` reads (``git ls-tree`` and
``git show`` at the pinned commit: only ``.py`` files, none of the large data files a
mirror may lack). Each file is linted on its own (``lint_paths([file])``), as
``gradwatch lint FILE`` does. With ``--against DIR`` the lint of another checkout's
collector (``DIR/collector`` first on ``PYTHONPATH``) runs too, and the findings that
differ are listed: how a rule change moves the counts on real code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.append(str(ROOT / "collector"))

ALARM = ("warning", "error")


def extract(git_dir: Path, commit: str, dest: Path) -> int:
    """Every ``.py`` file of ``commit`` into ``dest``; how many."""
    from materialize import extract_blobs

    dest.mkdir(parents=True, exist_ok=True)
    extract_blobs(git_dir, commit, dest, keep=lambda path: path.endswith(".py"))
    return sum(1 for _ in dest.rglob("*.py"))


def lint_files(root: Path) -> dict[str, list[list[Any]]]:
    """``{relative path: [[rule, line, message], ...]}`` of the warnings and errors of each
    ``.py`` file under ``root``, linted one by one (files with none left out)."""
    from gradwatch.lint import lint_paths

    out: dict[str, list[list[Any]]] = {}
    for f in sorted(root.rglob("*.py")):
        result = lint_paths([f])
        found = [[x.rule, x.line, x.message] for x in result.findings if x.severity in ALARM]
        if found:
            out[str(f.relative_to(root))] = found
    return out


def lint_mutants(
    programs: list[Any], trees: dict[str, Path], bug_class: str
) -> list[dict[str, Any]]:
    """Per program the class applies to: the lint's warning and error rules on the file the
    injector's edit changed."""
    import inject
    import mutate

    from gradwatch.lint import lint_paths

    expected = set(mutate.MUTATIONS[bug_class].expected)
    rows = []
    for prog in programs:
        source = trees.get(prog.project + "@" + prog.commit)
        if source is None:  # no mirror: left out of the lint too
            continue
        with tempfile.TemporaryDirectory(prefix="gw-lint-") as tmp:
            tree = Path(tmp) / "tree"
            shutil.copytree(source, tree, symlinks=True)
            at = inject.at_step(prog)
            changed = inject.mutate_tree(tree, prog.program, bug_class, at, prog.workdir)
            if changed is None:
                continue
            result = lint_paths([changed])
            rules = sorted({x.rule for x in result.findings if x.severity in ALARM})
            rows.append(
                {
                    "program": prog.name,
                    "file": str(changed.relative_to(tree)),
                    "rules": rules,
                    "named": bool(expected & set(rules)),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    import spec
    from materialize import find_git_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/lint_corpus.json")
    p.add_argument("--mutants", default="", help="comma-separated bug classes to lint as mutants")
    p.add_argument("--against", type=Path, help="another checkout: its lint's findings too")
    p.add_argument("--keep", type=Path, help="extract the files here (default: a temp folder)")
    args = p.parse_args(argv)

    programs = spec.all_programs()
    work = Path(args.keep or tempfile.mkdtemp(prefix="gw-lint-corpus-"))
    trees: dict[str, Path] = {}
    for prog in programs:
        key = prog.project + "@" + prog.commit
        if key in trees:
            continue
        git_dir = find_git_dir(prog.project)
        if git_dir is None:
            print(f"{prog.project}: no mirror (fetch it first); left out", flush=True)
            continue
        dest = work / (prog.project.replace("/", "+") + "@" + prog.commit[:12])
        if not dest.exists():
            extract(git_dir, prog.commit, dest)
        trees[key] = dest
    found = {d.name: lint_files(d) for d in sorted(set(trees.values()))}
    files = sum(1 for d in set(trees.values()) for _ in d.rglob("*.py"))
    doc: dict[str, Any] = {
        "command": " ".join(["python benchmarks/corpus/lint_corpus.py", *(argv or sys.argv[1:])]),
        "projects": len(trees),
        "files": files,
        "findings": found,
        "count": sum(len(v) for d in found.values() for v in d.values()),
    }
    if args.against:
        env = {**os.environ, "PYTHONPATH": str(args.against / "collector")}
        code = (
            "import json, sys; sys.path.insert(0, sys.argv[1]); import lint_corpus as lc; "
            "from pathlib import Path; "
            "print(json.dumps({d: lc.lint_files(Path(sys.argv[2]) / d) for d in sys.argv[3:]}))"
        )
        names = [d.name for d in sorted(set(trees.values()))]
        other = json.loads(
            subprocess.run(
                [sys.executable, "-c", code, str(HERE), str(work), *names],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout
        )
        diff = []
        for d in names:
            for f in sorted(set(found[d]) | set(other[d])):
                mine = {tuple(x[:2]) for x in found[d].get(f, [])}
                theirs = {tuple(x[:2]) for x in other[d].get(f, [])}
                diff += [{"file": f"{d}/{f}", "rule": r, "line": n, "only_in": "this"}
                         for r, n in sorted(mine - theirs)]  # fmt: skip
                diff += [{"file": f"{d}/{f}", "rule": r, "line": n, "only_in": "against"}
                         for r, n in sorted(theirs - mine)]  # fmt: skip
        doc["against"] = {"checkout": str(args.against), "differences": diff}
    doc["mutants"] = {
        c: lint_mutants(programs, trees, c) for c in [c for c in args.mutants.split(",") if c]
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{doc['files']} files of {doc['projects']} projects: {doc['count']} warnings/errors")
    for c, rows in doc["mutants"].items():
        print(f"mutants {c}: named by the lint {sum(r['named'] for r in rows)} of {len(rows)}")
    if args.against:
        print(f"differences against {args.against}: {len(doc['against']['differences'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
