"""Merge result files of runs made in parallel into one (each worker writes its own file
with ``--out``, then this folds them into the committed one).

    python benchmarks/corpus/merge.py corpus benchmarks/results/corpus.json A.json B.json
    python benchmarks/corpus/merge.py injection benchmarks/results/injection.json A.json B.json

``corpus``: records by program name; a later file's record replaces an earlier one, keeping
the earlier record's replicate group when the later has none (as ``run.py`` does).
``injection``: cases by (program, bug class), a later file's replacing an earlier one's.
The head (command, date, commit) is the last file's, its command preceded by those of the
others whose measured cases are kept.
The ``.md`` next to the output is written again.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _commands(docs: list[dict[str, Any]], key: str) -> str:
    parts = []
    for d in docs:
        head = d.get(key, {}) if key else d
        command = head.get("command")
        if command and command not in parts:
            parts.append(command)
    return "; then ".join(parts)


def merge_corpus(out: Path, inputs: list[Path]) -> dict[str, Any]:
    import run

    docs = [json.loads(p.read_text()) for p in inputs]
    doc: dict[str, Any] | None = None
    for d in docs:
        head = {k: v for k, v in d.items() if k not in ("programs", "summary")}
        doc = run.merge(doc, d["programs"], head)
    assert doc is not None
    doc["command"] = _commands(docs, "")
    doc["summary"] = run.summary(doc)
    run.write(doc, out)
    return doc


def merge_injection(out: Path, inputs: list[Path]) -> dict[str, Any]:
    import inject

    docs = [json.loads(p.read_text()) for p in inputs]
    cases: dict[tuple[str, str], dict[str, Any]] = {}
    source: dict[tuple[str, str], int] = {}
    for n, d in enumerate(docs):
        na = [{**c, "applicable": False} for c in d.get("not_applicable", [])]
        for c in [*d.get("cases", []), *na]:
            cases[(c["program"], c["bug_class"])] = c
            source[(c["program"], c["bug_class"])] = n
    # the commands of the files whose measured cases survive (a file that now gives only
    # its not-applicable pairs, which no run decides, is not named)
    used = sorted({source[k] for k, c in cases.items() if c.get("applicable", True)})
    meta = {**docs[-1]["meta"], "command": _commands([docs[n] for n in used], "meta")}
    builds: dict[str, int] = {}
    for c in cases.values():
        if c.get("applicable", True):
            builds[str(c.get("gradwatch"))] = builds.get(str(c.get("gradwatch")), 0) + 1
    if len(builds) > 1:  # each case names its build: say so instead of the last file's
        meta["commit"] = "per case: " + ", ".join(
            f"{b} ×{n}" for b, n in sorted(builds.items(), key=lambda kv: -kv[1])
        )
    order = list(inject.mutate.MUTATIONS)
    rows = sorted(cases.values(), key=lambda c: (c["program"], order.index(c["bug_class"])))
    inject.write(out, meta, rows)
    return {"summary": inject.summary(rows)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("kind", choices=["corpus", "injection"])
    p.add_argument("out", type=Path)
    p.add_argument("inputs", type=Path, nargs="+", help="earliest first")
    args = p.parse_args(argv)
    missing = [str(i) for i in args.inputs if not i.is_file()]
    if missing:
        p.error(f"no such file: {', '.join(missing)}")
    merged = (merge_corpus if args.kind == "corpus" else merge_injection)(args.out, args.inputs)
    print(json.dumps(merged["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
