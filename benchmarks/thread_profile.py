"""Where each thread's time goes per training step: plain, lower bound and gradwatch.

Wall time at torch's default thread count is at the mercy of the machine: torch's
intra-op workers spin after each op and wait for each other at every parallel region, so
any other runnable thread — another process, or one of gradwatch's — can hold up a whole
op. This script measures what wall time cannot show cleanly: per thread of the process,
the CPU time it ran (``/proc/self/task/<tid>/schedstat``, nanoseconds) and the times the
scheduler took its core away (``nonvoluntary_ctxt_switches``), per step, for blocks of
the three variants of ``collector_overhead.py`` (same models, steps and variants; a fresh
gradwatch run per block) in rotating order in one process.

Threads are grouped: ``training`` (the thread running the steps), ``torch workers``
(threads of the process that are neither the training thread nor Python threads: torch's
intra-op pool, and any thread a native library starts), ``gradwatch-writer`` and other
``gradwatch-*`` threads, by their Python names.

Usage::

    python benchmarks/thread_profile.py                    # mlp,cnn,transformer at default,1
    python benchmarks/thread_profile.py --models mlp --threads default --reps 4
    python benchmarks/thread_profile.py --quick --out /tmp/t.json

Results: ``results/thread_profile.json`` and ``.md``. For the GIL view, ``--loop S``
only trains the first model under gradwatch for S seconds, to run under
``py-spy record --gil --threads -f raw -o gil.txt -- python benchmarks/thread_profile.py
--models mlp --threads default --loop 20`` (docs/cost.md has what it showed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import collector_overhead as core
import thread_settings

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "thread_profile.json"
Sample = dict[int, tuple[int, int]]  # tid -> (on-CPU ns, involuntary switches)


def sample() -> Sample:
    """On-CPU nanoseconds and involuntary context switches of every thread of this process."""
    out: Sample = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            base = f"/proc/self/task/{tid}"
            ns = int(Path(f"{base}/schedstat").read_text().split()[0])
            status = Path(f"{base}/status").read_text()
            line = next(x for x in status.splitlines() if x.startswith("nonvoluntary_ctxt"))
            out[int(tid)] = (ns, int(line.split()[1]))
    return out


def group(tid: int, names: dict[int, str], training: int) -> str:
    """The row a thread is reported under."""
    if tid == training:
        return "training"
    name = names.get(tid)
    if name is None:
        return "torch workers"
    return name if name.startswith("gradwatch") else "other Python threads"


def block(
    state: core.VariantState, work: core.Workload, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """One block of one variant: per thread group, CPU ms and involuntary switches per step."""
    ctx = core.attached(state, tmp) if state.name == "gradwatch" else contextlib.nullcontext()
    with ctx:
        core.timed_steps(state, work.batches, args.settle)
        names = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
        before, t0 = sample(), time.perf_counter()
        wall, _cpu = core.timed_steps(state, work.batches, args.steps)
        after, elapsed = sample(), time.perf_counter() - t0
    cpu: dict[str, float] = defaultdict(float)
    switches: dict[str, float] = defaultdict(float)
    training = threading.get_native_id()
    for tid, (ns, nv) in after.items():
        ns0, nv0 = before.get(tid, (0, 0))
        key = group(tid, names, training)
        cpu[key] += (ns - ns0) / 1e6 / args.steps
        switches[key] += (nv - nv0) / args.steps
    return {
        "wall_ms": statistics.median(wall) * 1e3,
        "elapsed_ms": elapsed * 1e3 / args.steps,
        "cpu_ms": dict(cpu),
        "involuntary_switches": dict(switches),
        "load": os.getloadavg()[0],
    }


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every model at the current thread setting."""
    result: dict[str, Any] = {"machine": core.machine_info(), "models": {}}
    result["config"] = {
        "command": " ".join(["python", "benchmarks/thread_profile.py", *sys.argv[1:]]),
        **{k: getattr(args, k) for k in ("reps", "steps", "settle")},
    }
    for name in args.models:
        work = core.make_workload(name, core.BATCH_SIZE[name])
        states = core.make_variants(work, args.steps)
        for state in states.values():  # warm-up
            block(state, work, args, tmp)
        blocks: dict[str, list[dict[str, Any]]] = {v: [] for v in core.VARIANTS}
        for rep in range(args.reps):
            for v in core.VARIANTS[rep % 3 :] + core.VARIANTS[: rep % 3]:
                blocks[v].append(block(states[v], work, args, tmp))
            print(f"[{name}] rep {rep + 1}/{args.reps}", flush=True)
        result["models"][name] = {v: summarize(bs) for v, bs in blocks.items()}
    return result


def summarize(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the blocks of one variant (a group absent from a block counts 0)."""
    groups = sorted({g for b in blocks for g in b["cpu_ms"]})
    return {
        "wall_ms": statistics.median(b["wall_ms"] for b in blocks),
        "cpu_ms": {g: statistics.median(b["cpu_ms"].get(g, 0.0) for b in blocks) for g in groups},
        "involuntary_switches": {
            g: statistics.median(b["involuntary_switches"].get(g, 0.0) for b in blocks)
            for g in groups
        },
        "load": [min(b["load"] for b in blocks), max(b["load"] for b in blocks)],
    }


def markdown(result: dict[str, Any]) -> str:
    """One table per thread setting: per model, variant and thread group."""
    m, cfg = result["machine"], result["config"]
    loads = [x for r in result["models"].values() for v in r.values() for x in v["load"]]
    lines = [
        f"# Per-thread CPU per step at {result.get('threads_label', '?')} threads",
        "",
        f"{m['date']} · {m['cpu_model']} ({m['logical_cpus']} logical CPUs) · torch"
        f" {m['torch']} · gradwatch sources {m['gradwatch_sources_sha256']} · 1-min load"
        f" average {min(loads):.2f}–{max(loads):.2f} · `{cfg['command']}` · {cfg['reps']}"
        f" repetitions × {cfg['steps']} steps per variant, rotating order.",
        "",
        "Medians over blocks, per step: CPU ms each thread group ran, and how often the"
        " scheduler took its core away (involuntary switches).",
        "",
        "| model | variant | wall ms | thread group | CPU ms | involuntary switches |",
        "|---|---|---:|---|---:|---:|",
    ]
    for name, variants in result["models"].items():
        for v, r in variants.items():
            for g, ms in r["cpu_ms"].items():
                nv = r["involuntary_switches"][g]
                lines.append(f"| {name} | {v} | {r['wall_ms']:.2f} | {g} | {ms:.3f} | {nv:.2f} |")
    return "\n".join(lines) + "\n"


def loop(model: str, seconds: float, tmp: Path) -> None:
    """Train ``model`` under gradwatch for ``seconds`` (to run under a profiler: py-spy)."""
    work = core.make_workload(model, core.BATCH_SIZE[model])
    state = core.make_variants(work, 1)["gradwatch"]
    with core.attached(state, tmp):
        start, done = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            done += len(core.timed_steps(state, work.batches, 10)[0])
    print(f"{done} steps of {model} in {seconds:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(core.MODELS), help="comma-separated subset")
    p.add_argument("--threads", default="default,1", help=thread_settings.SPEC_HELP)
    p.add_argument("--reps", type=int, default=6, help="repetitions (default 6)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per block (default 40)")
    p.add_argument("--settle", type=int, default=10, help="untimed steps first (default 10)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (.md beside it)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 rep x 3 steps, MLP")
    p.add_argument(
        "--loop",
        type=float,
        metavar="SECONDS",
        help="only train the first model under"
        " gradwatch for SECONDS at the first thread setting (for py-spy) and exit",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.steps, args.settle, args.models = 1, 3, 1, "mlp"
    args.models = [x for x in args.models.split(",") if x]
    try:
        counts = thread_settings.parse(args.threads)
    except ValueError as e:
        p.error(str(e))
    if set(args.models) - set(core.MODELS) or args.reps < 1 or args.steps < 1:
        p.error(f"need models among {core.MODELS}, --reps >= 1 and --steps >= 1")
    with tempfile.TemporaryDirectory(prefix="gradwatch-threads-") as tmp:
        if args.loop is not None:
            thread_settings.use(counts[0])
            loop(args.models[0], args.loop, Path(tmp))
            return 0
        runs = [measure(args, Path(tmp)) for n in counts if thread_settings.use(n)]
    print(thread_settings.write(args.out, runs, markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
