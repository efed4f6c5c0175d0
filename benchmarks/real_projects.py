"""gradwatch on real public training code, unmodified and with one bug injected at a time.

Runs karpathy/nanoGPT, karpathy/minGPT (projects/adder), a Hugging Face `Trainer` and a
Lightning module (both in `real_projects_scripts/`) on the CPU under `gradwatch run`, as
their users run them; then the same with each bug of issue 18 injected into a copy (see
`real_projects_cases.py`); and pytorch/examples `regression` and `word_language_model`,
whose loops update parameters by hand. Records what gradwatch said per run, how many steps
it counted against the updates the script made, and whether each bug was caught by the
right check at the right step.

Needs: the gradwatch env with its `integrations` extra (transformers, lightning), and local
exports of the two repositories (no network at run time; the char dataset nanoGPT's
prepare.py would download is written from the stdlib's sources)::

    git --git-dir=<bare nanoGPT> archive HEAD | tar -x -C /work/ext/nanoGPT   # likewise minGPT
    python benchmarks/real_projects.py [--quick] [--only nanoGPT] [--nanogpt DIR] [--mingpt DIR]
        [--examples DIR]

Defaults: `$NANOGPT_DIR` or /work/ext/nanoGPT, `$MINGPT_DIR` or /work/ext/minGPT,
`$EXAMPLES_DIR` or /work/ext/examples (pytorch/examples; the WikiText-2 files are written
from local text). The commit is read with git, or from a `.source-commit` file in an
exported tree. Writes
`benchmarks/results/real_projects.json` and `.md` (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_projects_cases as rc
import real_projects_report as report

DEFAULT_OUT = rc.HERE / "results" / "real_projects.json"
ALARM = ("warning", "error")


def commit_of(tree: Path) -> str:
    """The checkout's commit: git if it is a clone, else the export's `.source-commit`."""
    if (tree / ".git").exists():
        cmd = ["git", "-C", str(tree), "rev-parse", "HEAD"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    marker = tree / ".source-commit"
    return marker.read_text().strip() if marker.exists() else "unknown"


def source_tree(project: str, trees: dict[str, Path]) -> Path:
    return trees.get(project, rc.SCRIPTS)


def prepare(case: rc.Case, src: Path, dest: Path) -> Path:
    """A fresh copy of the project with the local data it needs and the case's bug injected."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".git", "assets", "*.ipynb", "out*"))
    if case.project == "nanoGPT":
        rc.write_char_dataset(dest / "data" / "shakespeare_char")
    if case.project == "hf-trainer":
        (dest / "input.txt").write_text(rc.local_text())
    if case.cwd == "word_language_model":
        rc.write_wikitext(dest / case.cwd / "data" / "wikitext-2")
    for file, old, new in (*case.setup, *(case.bug.patches if case.bug else ())):
        path = dest / file
        text = path.read_text()
        if text.count(old) != 1:
            raise SystemExit(
                f"{case.label}: the injection no longer matches {file} "
                f"({old!r} found {text.count(old)} times, not once)"
            )
        path.write_text(text.replace(old, new))
    return dest


def run_case(
    case: rc.Case, trees: dict[str, Path], timeout: float, threads: int | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gw-real-") as tmp:
        copy = prepare(case, source_tree(case.project, trees), Path(tmp) / "project")
        data = Path(tmp) / "gw"
        path = os.pathsep.join(x for x in (str(copy), os.environ.get("PYTHONPATH")) if x)
        env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        env.pop("GRADWATCH_DIR", None)
        if threads is not None:  # an environment setting, as on a shared machine; no code change
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        gw = [sys.executable, "-m", "gradwatch", "run", "--data-dir", str(data)]
        cmd = [*gw, "--project", "real-projects", *case.gw_args, "--", sys.executable, *case.argv]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, cwd=copy / case.cwd, env=env, capture_output=True, text=True, timeout=timeout
            )
            code: int | str = proc.returncode
            tail = proc.stderr[-1500:]
            out = proc.stdout
        except subprocess.TimeoutExpired as exc:
            code, tail, out = "timeout", str(exc.stderr or "")[-1500:], ""
        wall = time.perf_counter() - t0
        runs = sorted((data / "runs").glob("*"))
        findings = [f for run in runs for f in read_findings(run, data)]
        counted = counted_steps(data)
    outcome = {
        "exit": code,
        "wall_s": round(wall, 1),
        "threads": threads,
        "load_1min": round(os.getloadavg()[0], 1),  # the machine's load as the run ended
        "stderr_tail": tail,
    }
    steps = {"steps": updates(case, out), "steps_counted": counted}
    return {**describe(case), **outcome, **steps, **judge(case, findings, code, steps)}


def counted_steps(data: Path) -> int | None:
    """The steps gradwatch counted (`gradwatch runs --json`; the largest over the runs of
    the invocation), or None when it recorded no run."""
    cmd = [sys.executable, "-m", "gradwatch", "runs", "--json", "--data-dir", str(data)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    try:
        runs = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        return None
    return max((int(r.get("steps") or 0) for r in runs), default=None)


def updates(case: rc.Case, stdout: str) -> int | None:
    """The updates the script made: the case's own count, or read from its output."""
    if case.steps_from is None:
        return case.steps
    found = re.search(case.steps_from, stdout)
    return int(found.group(1)) if found else None


def read_findings(run: Path, data: Path) -> list[dict[str, Any]]:
    """A run's findings through the CLI users would call (`gradwatch findings --json`)."""
    cmd = [sys.executable, "-m", "gradwatch", "findings", "--json", "--data-dir", str(data)]
    out = subprocess.run([*cmd, str(run)], capture_output=True, text=True)
    try:
        found: list[dict[str, Any]] = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        bad = "<findings --json is not JSON>"
        return [{"check": bad, "severity": "error", "source": "runtime", "step": None}]
    return found


def describe(case: rc.Case) -> dict[str, Any]:
    return {
        "label": case.label, "project": case.project, "config": case.config, "seed": case.seed,
        "steps": case.steps, "argv": " ".join(case.argv), "gradwatch_args": " ".join(case.gw_args),
        "bug": case.bug.name if case.bug else None,
        "expect": list(case.bug.expect) if case.bug else [],
        "expect_step": case.bug.step if case.bug else None,
    }  # fmt: skip


def brief(f: dict[str, Any]) -> dict[str, Any]:
    return {k: f.get(k) for k in ("check", "severity", "step", "param", "message")}


def judge(
    case: rc.Case,
    findings: list[dict[str, Any]],
    code: int | str = 0,
    steps: dict[str, int | None] | None = None,
) -> dict[str, Any]:
    """Counts per severity and source, and the verdict: quiet / false alarm for a clean run
    (`steps miscounted` when gradwatch counted other than the script's updates);
    caught / late / wrong check / missed for an injected bug; `script failed` when the
    training itself exited with an error (a bug that is not silent)."""
    runtime = [f for f in findings if f.get("source") != "lint"]
    lint = [f for f in findings if f.get("source") == "lint"]
    alarms = [f for f in runtime if f.get("severity") in ALARM]
    counts = {s: sum(f.get("severity") == s for f in runtime) for s in ("error", "warning", "info")}
    result: dict[str, Any] = {
        "runtime_counts": counts,
        "lint_alarms": sorted({f["check"] for f in lint if f.get("severity") in ALARM}),
        "alarms": [brief(f) for f in sorted(alarms, key=_by_step)],
    }
    if case.bug is None:
        result["verdict"] = "quiet" if not alarms else "false alarm"
        if steps is not None and steps["steps"] != steps["steps_counted"]:
            result["verdict"] += ", steps miscounted"
        return result
    bug = case.bug
    named = [f for f in alarms if f["check"] in bug.expect]
    on_time = [f for f in named if _at(f, bug.step - 1, bug.step + bug.window)]
    verdict = "caught" if on_time else "late" if named else "wrong check" if alarms else "missed"
    result["verdict"] = verdict if code == 0 else f"script failed ({code}); {verdict}"
    hit = (on_time or named or alarms or [None])[0]
    result["caught_by"] = brief(hit) if hit else None
    return result


def _earlier(out: Path) -> list[dict[str, Any]]:
    """The runs an earlier (interrupted) invocation wrote to ``out``."""
    if not out.exists():
        return []
    runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"]
    return runs


def _by_step(f: dict[str, Any]) -> tuple[bool, int]:
    return f.get("step") is None, f.get("step") or 0


def _at(f: dict[str, Any], first: int, last: int) -> bool:
    step = f.get("step")
    return isinstance(step, int) and first <= step <= last


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    p.add_argument("--quick", action="store_true", help="one clean run per project, each bug once")
    p.add_argument("--only", default="", help="only cases whose label contains this text")
    env = os.environ.get
    p.add_argument("--nanogpt", type=Path, default=Path(env("NANOGPT_DIR", "/work/ext/nanoGPT")))
    p.add_argument("--mingpt", type=Path, default=Path(env("MINGPT_DIR", "/work/ext/minGPT")))
    p.add_argument("--examples", type=Path, default=Path(env("EXAMPLES_DIR", "/work/ext/examples")))
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--threads",
        type=int,
        help="OMP_NUM_THREADS for the runs (default: unset, torch's own default); on a "
        "machine whose cores are shared, 1 avoids OpenMP's oversubscription stalls",
    )
    p.add_argument("--resume", action="store_true", help="keep the runs --out holds, run the rest")
    args = p.parse_args(argv)
    trees = {"nanoGPT": args.nanogpt, "minGPT": args.mingpt, "pytorch-examples": args.examples}
    # The --quick subset first: an interrupted full run still covers every project and bug.
    ordered = sorted(rc.cases(), key=lambda c: not c.quick)
    chosen = [c for c in ordered if (c.quick or not args.quick) and args.only in c.label]
    if not chosen:
        p.error(f"no case matches --only {args.only!r}")
    for name, tree in trees.items():
        flag = "examples" if name == "pytorch-examples" else name.lower()
        needed = {c.cwd for c in chosen if c.project == name}
        if needed and not all((tree / cwd).is_dir() for cwd in needed):
            p.error(f"no {name} checkout at {tree}: export it (see --help) or pass --{flag}")
    meta = {
        "command": " ".join(["python benchmarks/real_projects.py", *(argv or sys.argv[1:])]),
        "commits": {k: commit_of(v) for k, v in {**trees, "gradwatch": rc.HERE.parent}.items()},
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average (1 min) "
        f"{os.getloadavg()[0]:.1f} at the start",
        "packages": report.versions(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.resume and args.out.exists():  # say which invocations made the kept runs
        meta["command"] = (
            f"{json.loads(args.out.read_text())['meta']['command']}; then {meta['command']}"
        )
    results = _earlier(args.out) if args.resume else []
    done = {r["label"] for r in results}
    order = {c.label: i for i, c in enumerate(rc.cases())}
    for case in (c for c in chosen if c.label not in done):
        print(f"{case.label} ...", end=" ", flush=True)
        results.append(run_case(case, trees, args.timeout, args.threads))
        print(f"{results[-1]['verdict']} ({results[-1]['wall_s']} s)", flush=True)
        results.sort(key=lambda r: order.get(r["label"], len(order)))
        # Written after every run, so an interrupted benchmark still leaves what it measured.
        args.out.write_text(json.dumps({"meta": meta, "runs": results}, indent=1) + "\n")
        ran = {r["label"] for r in results}
        missing = tuple(c.label for c in rc.cases() if c.label not in ran)
        args.out.with_suffix(".md").write_text(report.markdown(meta, results, missing))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
