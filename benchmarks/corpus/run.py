"""Run the corpus: every program, at its pinned commit, unmodified, with and without
``gradwatch run``; record gradwatch's findings and whether training came out identical.

    python benchmarks/corpus/run.py [--only SUBSTR ...] [--seeds] [--out FILE] [--jobs N]
        [--list] [--prune] [--replicates N]

``--only`` keeps programs whose name contains one of the substrings; their records replace
those of the same name in an existing ``--out`` file (so the corpus runs in batches), the
others are kept (``--prune`` drops the records of programs no longer listed). ``--seeds``
runs every seed a program lists (default: its first).
``--replicates N`` runs each program instead as a replicate group: N runs under gradwatch,
seeds 0..N-1 (the program's own seeds first), each its own process, in one data folder,
with one project and run name, then reads every run's findings and stores what the group's
structure invariants said in the program's record (``replicates``), its other fields kept.
Writes ``benchmarks/results/corpus.json`` and a table in ``corpus.md`` next to it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch import Launch, launch, read_run_findings
from materialize import CACHE, materialize, tree_dir
from spec import Program, all_programs

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "corpus.json"
ALARM = ("warning", "error")
#: what a record's `steps` counts (launch.steps_of)
STEPS_KINDS = {
    "optimizer": "optimizer steps (of the busiest optimizer)",
    "hand": "hand updates (backward passes after which parameters in no optimizer changed)",
}


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": _torch_version(),
    }


def _torch_version() -> str:
    try:
        import torch

        return str(torch.__version__)
    except ImportError:
        return "none"


def gradwatch_commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    commit = out.stdout.strip() or "unknown"
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "collector"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{commit}+dirty" if dirty else commit


def _tail(text: str, n: int = 1200) -> str:
    return text[-n:]


def dedupe(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings once each (over seeds), by step then check."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for f in findings:
        key = (f.get("check"), f.get("severity"), f.get("step"), f.get("message"))
        seen.setdefault(key, f)
    return sorted(seen.values(), key=lambda f: (f.get("step") is None, f.get("step") or 0))


def record(
    program: Program, seeds: list[int], pairs: list[tuple[Launch, Launch]]
) -> dict[str, Any]:
    """The corpus.json record of one program from its (without, with gradwatch) launches."""
    plain_ok = all(a.ok for a, _ in pairs)
    watched_ok = all(b.ok for _, b in pairs)
    identical = bool(pairs) and all(a.ok and b.ok and a.digest == b.digest for a, b in pairs)
    steps = [a.steps for a, _ in pairs if a.steps is not None]
    kinds = sorted({a.steps_kind for a, _ in pairs if a.steps_kind})
    backward = [a.backward for a, _ in pairs if a.backward is not None]
    if not plain_ok:
        status = "program-failed"  # without gradwatch: our setup, not gradwatch
    elif not watched_ok:
        status = "failed-under-gradwatch"
    elif not identical:
        status = "outputs-differ"
    elif min(steps, default=0) < program.steps:
        status = "too-few-steps"
    else:
        status = "ok"
    rec: dict[str, Any] = {
        "name": program.name,
        "project": program.project,
        "commit": program.commit,
        "program": program.program,
        "args": list(program.args),
        "tags": list(program.tags),
        "status": status,
        "steps": min(steps) if steps else None,
        "steps_kind": STEPS_KINDS.get(kinds[0]) if len(kinds) == 1 else None,
        "backward_passes": min(backward) if backward else None,
        "steps_expected": program.steps,
        "seeds": seeds,
        "outputs_identical": identical,
        "digests": [{"seed": s, "without": a.digest[:16], "with": b.digest[:16]}
                    for s, (a, b) in zip(seeds[: len(pairs)], pairs, strict=True)],
        "seconds": {
            "without": round(sum(a.seconds for a, _ in pairs), 1),
            "with": round(sum(b.seconds for _, b in pairs), 1),
        },
        "findings": dedupe([f for _, b in pairs for f in b.findings]),
        "gradwatch_commit": gradwatch_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }  # fmt: skip
    if status != "ok" and pairs:
        bad = next((x for pair in pairs for x in pair if not x.ok), pairs[0][1])
        rec["returncode"] = bad.returncode
        rec["stderr_tail"] = _tail(bad.stderr)
    return rec


def run_program(program: Program, seeds: list[int], cache: Path) -> dict[str, Any]:
    tree = materialize(program, tree_dir(program, cache))
    pairs: list[tuple[Launch, Launch]] = []
    for seed in seeds:
        with tempfile.TemporaryDirectory(prefix="gw-corpus-data-") as tmp:
            plain = launch(program, tree, seed=seed, gradwatch=False, data_dir=Path(tmp))
            watched = launch(program, tree, seed=seed, gradwatch=True, data_dir=Path(tmp))
        pairs.append((plain, watched))
    return record(program, seeds, pairs)


def _run_dirs(data_dir: Path) -> set[Path]:
    runs = data_dir / "runs"
    return {p for p in runs.iterdir() if p.is_dir()} if runs.is_dir() else set()


def is_structure(finding: dict[str, Any]) -> bool:
    """A finding of the structure checks: a group invariant, or derived from the structure
    signature (a mid-run change)."""
    details = finding.get("details") or {}
    derived = isinstance(details, dict) and details.get("derived") == "structure"
    return finding.get("check") == "group-invariant" or derived


def group_evidence(run_dirs: list[Path]) -> dict[str, Any]:
    """Whether ``run_dirs`` form one replicate group as gradwatch keys it (one config and
    code hash, one parameter layout, each run made by its own process, all finished), and
    how many invariants their good runs give (:mod:`gradwatch.core.structure.group`)."""
    from gradwatch.core.structure.group import learn, member

    members = [member(d, lambda d: False) for d in run_dirs]
    keys = {m.key for m in members}
    layouts = {m.layout for m in members}
    processes = [m.process for m in members]
    formed = (
        len(members) >= 2
        and len(keys) == 1
        and None not in keys
        and len(layouts) == 1
        and None not in processes
        and len(set(processes)) == len(processes)
    )
    inv = learn([m for m in members if m.status == "finished"]) if formed else None
    out: dict[str, Any] = {"formed": formed, "statuses": [m.status for m in members]}
    if inv is not None:
        out["invariants"] = {
            "grads_always": sum(len(v) for v in inv.always.values()),
            "grads_never": sum(len(v) for v in inv.never.values()),
            "lifecycles": sum(len(v) for v in inv.lifecycles.values()),
            "states": sum(len(v) for v in inv.states.values()),
        }
    return out


def positional_evidence(per_seed: list[list[Path]], dirs: list[Path]) -> dict[str, Any]:
    """The group evidence of a replicate launch. A program that builds a new optimizer
    several times in one process (a pruning round, a federated client, a pass over the
    data) makes several runs per process, and runs of one process are never replicates of
    each other: when every seed made the same number of runs, the k-th runs of the seeds
    are a group, for each k (``formed`` when each of them is; ``positions``: how many;
    the invariants added up). Otherwise all runs as one group."""
    counts = {len(r) for r in per_seed}
    if not dirs:
        return {"formed": False}
    if len(per_seed) < 2 or len(counts) != 1 or counts == {1}:
        return group_evidence(dirs)
    groups = [group_evidence([r[k] for r in per_seed]) for k in range(counts.pop())]
    out: dict[str, Any] = {
        "formed": all(g["formed"] for g in groups),
        "statuses": [s for g in groups for s in g["statuses"]],
        "positions": len(groups),
    }
    if out["formed"]:
        keys = ("grads_always", "grads_never", "lifecycles", "states")
        out["invariants"] = {k: sum(g["invariants"][k] for g in groups) for k in keys}
    return out


def run_replicates(
    program: Program,
    seeds: list[int],
    cache: Path,
    tree: Path | None = None,
    keep: Path | None = None,
) -> dict[str, Any]:
    """The ``replicates`` field of a program's record: ``seeds`` runs under gradwatch in one
    data folder (one replicate group), then every run's structure findings. ``tree``: the
    program's materialised tree (default: materialise it); ``keep``: where the data folder
    is copied when the group drew a warning or error (to read its runs again)."""
    tree = tree or materialize(program, tree_dir(program, cache))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gw-corpus-group-") as tmp:
        data = Path(tmp)
        dirs: list[Path] = []
        for seed in seeds:
            before = _run_dirs(data)
            done = launch(program, tree, seed=seed, gradwatch=True, data_dir=data)
            new = sorted(_run_dirs(data) - before)
            dirs += new
            runs.append(
                {"seed": seed, "ok": done.ok, "steps": done.steps, "runs": [p.name for p in new],
                 "seconds": round(done.seconds, 1)}
            )  # fmt: skip
            if not done.ok:
                runs[-1]["stderr_tail"] = _tail(done.stderr, 600)
        findings = [f for d in dirs for f in read_run_findings(data, d)]
        by_name = {d.name: d for d in dirs}
        evidence = positional_evidence([[by_name[r] for r in x["runs"]] for x in runs], dirs)
        alarmed = any(f.get("severity") in ALARM for f in findings)
        if keep is not None and alarmed:
            shutil.copytree(data, keep, dirs_exist_ok=True)
    structure = [f for f in findings if is_structure(f)]
    alarms = [f for f in findings if f.get("severity") in ALARM]
    return {
        "seeds": seeds,
        "runs": len(dirs),
        "group": evidence,
        "group_findings": [f for f in structure if f.get("severity") in ALARM],
        "structure_info": len([f for f in structure if f.get("severity") not in ALARM]),
        "other_alarms": [f for f in alarms if not is_structure(f)],
        "launches": runs,
        "gradwatch_commit": gradwatch_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _slug(name: str) -> str:
    """A folder name for a program name (`karpathy/nanoGPT:train.py [compile]`)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def replicate_seeds(program: Program, n: int) -> list[int]:
    """``n`` seeds: the program's own first, then the smallest others."""
    seeds = list(dict.fromkeys(program.seeds))[:n]
    extra = (s for s in range(1000) if s not in seeds)
    return seeds + [next(extra) for _ in range(n - len(seeds))]


def merge(
    old: dict[str, Any] | None, new: list[dict[str, Any]], head: dict[str, Any]
) -> dict[str, Any]:
    """``head`` + the records of ``old`` whose names are not in ``new``, + ``new``, by name.
    A new record without ``replicates`` keeps the old record's (a replicate group is its
    own measurement, with its own commit and date; a plain re-run does not redo it)."""
    before = {r["name"]: r for r in (old or {}).get("programs", [])}
    fresh: dict[str, dict[str, Any]] = {}
    for r in new:
        prior = before.get(r["name"]) or {}
        keep = "replicates" in prior and "replicates" not in r
        fresh[r["name"]] = {**r, "replicates": prior["replicates"]} if keep else r
    kept = [r for r in (old or {}).get("programs", []) if r["name"] not in fresh]
    programs = sorted([*kept, *fresh.values()], key=lambda r: r["name"])
    return {**head, "programs": programs}


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    programs = doc["programs"]
    alarms = [f for r in programs for f in r["findings"] if f.get("severity") in ALARM]
    groups = [r["replicates"] for r in programs if r.get("replicates")]
    return {
        "replicate_groups": len(groups),
        "replicate_groups_formed": sum(bool(g["group"].get("formed")) for g in groups),
        "programs_with_group_warnings": sum(bool(g["group_findings"]) for g in groups),
        "programs": len(programs),
        "projects": len({r["project"] for r in programs}),
        "ok": sum(r["status"] == "ok" for r in programs),
        "outputs_identical": sum(bool(r["outputs_identical"]) for r in programs),
        "programs_with_alarms": sum(
            any(f.get("severity") in ALARM for f in r["findings"]) for r in programs
        ),
        "alarms": len(alarms),
        "tags": sorted({t for r in programs for t in r.get("tags", [])}),
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(doc: dict[str, Any]) -> str:
    """The readable table of corpus.json."""
    s = doc["summary"]
    m = doc["machine"]
    out = [
        "# gradwatch on the program corpus",
        "",
        f"Written by `{doc['command']}` on {doc['date']}; gradwatch {doc['gradwatch_commit']}; "
        f"{m['platform']}, {m['cpus']} CPUs, Python {m['python']}, torch {m['torch']}.",
        "",
        f"{s['programs']} programs from {s['projects']} projects; {s['ok']} ran clean to the end "
        f"in both modes; {s['outputs_identical']} came out identical with and without gradwatch; "
        f"{s['programs_with_alarms']} drew warnings or errors ({s['alarms']} in all).",
        "",
        "| program | commit | tags | status | steps | seeds | identical | s without / with "
        "| findings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["programs"]:
        counts: dict[str, int] = {}
        for f in r["findings"]:
            counts[f.get("severity") or "?"] = counts.get(f.get("severity") or "?", 0) + 1
        found = ", ".join(f"{n} {sev}" for sev, n in sorted(counts.items())) or "none"
        secs = f"{r['seconds']['without']} / {r['seconds']['with']}"
        out.append(
            f"| {_cell(r['name'])} | {r['commit'][:10]} | {', '.join(r.get('tags', []))} "
            f"| {r['status']} | {r['steps']} | {r['seeds']} "
            f"| {'yes' if r['outputs_identical'] else '**no**'} | {secs} | {found} |"
        )
    alarms = [(r, f) for r in doc["programs"] for f in r["findings"] if f.get("severity") in ALARM]
    out += ["", "## Warnings and errors", ""]
    if not alarms:
        out.append("None.")
    for r, f in alarms:
        step = f"step {f['step']}" if f.get("step") is not None else "-"
        out.append(
            f"- {_cell(r['name'])}: **{f['severity']}** `{f['check']}` at {step} "
            f"({f.get('source') or 'runtime'}): {_cell(str(f.get('message')))}"
        )
    groups = [(r, r["replicates"]) for r in doc["programs"] if r.get("replicates")]
    if groups:
        formed = sum(bool(g["group"].get("formed")) for _, g in groups)
        out += [
            "",
            "## Replicate groups",
            "",
            f"{len(groups)} programs run as a replicate group of seeds under gradwatch "
            f"(`--replicates`); {formed} formed one group as gradwatch keys it; "
            f"{sum(bool(g['group_findings']) for _, g in groups)} drew structure-invariant "
            "warnings or errors.",
            "",
            "| program | seeds | group | invariants (grads always / never, lifecycles, states) "
            "| structure warnings | other warnings |",
            "|---|---|---|---|---|---|",
        ]
        for r, g in groups:
            inv = g["group"].get("invariants") or {}
            held = " / ".join(
                str(inv.get(k, "-"))
                for k in ("grads_always", "grads_never", "lifecycles", "states")
            )
            formed_cell = "yes" if g["group"].get("formed") else "**no**"
            out.append(
                f"| {_cell(r['name'])} | {g['seeds']} | {formed_cell} "
                f"| {held} | {len(g['group_findings'])} | {len(g.get('other_alarms', []))} |"
            )
        for r, g in groups:
            for f in g["group_findings"]:
                out.append(
                    f"- {_cell(r['name'])}: **{f['severity']}** `{f['check']}` at step "
                    f"{f.get('step')}: {_cell(str(f.get('message')))}"
                )
    failed = [r for r in doc["programs"] if r["status"] != "ok"]
    if failed:
        out += ["", "## Not ok", ""]
        for r in failed:
            tail = _cell(r.get("stderr_tail", "")[-300:])
            out.append(f"- {_cell(r['name'])}: {r['status']} (exit {r.get('returncode')}): {tail}")
    return "\n".join(out) + "\n"


def write(doc: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(doc))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="substring of program names")
    ap.add_argument("--exact", action="store_true", help="--only names whole program names")
    ap.add_argument("--seeds", action="store_true", help="every seed a program lists")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--list", action="store_true", help="list the programs and stop")
    ap.add_argument("--fresh", action="store_true", help="re-extract the trees")
    ap.add_argument(
        "--replicates",
        type=int,
        default=0,
        metavar="N",
        help="run each program as a replicate group of N seeds under gradwatch instead",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --replicates: copy the data folder of a group that drew a warning or error "
        "to DIR/<program> (to read its runs again)",
    )
    ap.add_argument(
        "--prune", action="store_true", help="drop records of programs no longer listed, and stop"
    )
    args = ap.parse_args(argv)
    programs = [
        p
        for p in all_programs()
        if not args.only or any(o == p.name if args.exact else o in p.name for o in args.only)
    ]
    if args.prune:
        listed = {p.name for p in all_programs()}
        doc = json.loads(args.out.read_text())
        gone = [r["name"] for r in doc["programs"] if r["name"] not in listed]
        doc["programs"] = [r for r in doc["programs"] if r["name"] in listed]
        doc["summary"] = summary(doc)
        write(doc, args.out)
        print("dropped:", ", ".join(gone) or "nothing")
        return 0
    if args.list:
        for p in programs:
            print(f"{p.name}  {' '.join(p.args)}  [{', '.join(p.tags)}]")
        return 0
    if args.fresh:
        for p in programs:
            shutil.rmtree(tree_dir(p, args.cache), ignore_errors=True)

    def group(p: Program) -> dict[str, Any]:
        seeds = replicate_seeds(p, args.replicates)
        try:
            keep = args.keep / _slug(p.name) if args.keep else None
            reps = run_replicates(p, seeds, args.cache, keep=keep)
        except Exception as exc:  # materialising or setup failed: say so, run the others
            reps = {"seeds": seeds, "runs": 0, "group": {"formed": False},
                    "group_findings": [], "other_alarms": [],
                    "error": f"{type(exc).__name__}: {exc}"[-1200:]}  # fmt: skip
        print(
            f"{p.name}: replicates {reps['runs']} runs, group formed "
            f"{reps['group'].get('formed')}, {len(reps['group_findings'])} group warnings, "
            f"{len(reps['other_alarms'])} other alarms, invariants "
            f"{reps['group'].get('invariants')}",
            flush=True,
        )
        return {"name": p.name, "replicates": reps}

    def one(p: Program) -> dict[str, Any]:
        seeds = list(p.seeds) if args.seeds else list(p.seeds[:1])
        try:
            rec = run_program(p, seeds, args.cache)
        except Exception as exc:  # materialising or setup failed: say so, run the others
            rec = {
                **record(p, seeds, []),
                "status": "runner-error",
                "stderr_tail": f"{type(exc).__name__}: {exc}"[-1200:],
            }
        alarms = sum(f.get("severity") in ALARM for f in rec["findings"])
        print(
            f"{p.name}: {rec['status']}, {rec['steps']} steps, identical "
            f"{rec['outputs_identical']}, {alarms} alarms, {rec['seconds']}",
            flush=True,
        )
        return rec

    head = {
        "command": "python benchmarks/corpus/run.py " + " ".join(argv or sys.argv[1:]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "gradwatch_commit": gradwatch_commit(),
    }
    lock = threading.Lock()
    doc: dict[str, Any] = {}

    def done(rec: dict[str, Any]) -> None:
        """Merge one finished program into the result file at once (a batch cut short
        keeps what it ran)."""
        nonlocal doc
        with lock:
            old = json.loads(args.out.read_text()) if args.out.is_file() else None
            if args.replicates:  # into the program's record, its other fields kept
                prior = next(
                    (r for r in (old or {}).get("programs", []) if r["name"] == rec["name"]), None
                )
                if prior is None:
                    print(
                        f"{rec['name']}: no record to add replicates to; run it first", flush=True
                    )
                    return
                rec = {**prior, "replicates": rec["replicates"]}
            doc = merge(old, [rec], head)
            doc["summary"] = summary(doc)
            write(doc, args.out)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for rec in pool.map(group if args.replicates else one, programs):
            done(rec)
    print(json.dumps(doc.get("summary", {})))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
