"""gradwatch's per-step cost next to the per-step gradient logging of wandb, TensorBoard,
MLflow and aim, on the three CPU models of benchmarks/collector_overhead.py.

Each variant (benchmarks/peer_variants.py) trains its own copy of the seeded model on the
same synthetic batches, with one tracker run per variant for the whole model (set up and
closed outside the timed blocks). Per repetition every variant runs one block of
``--steps`` steps, then flushes what it buffers; the order of the blocks rotates between
repetitions, and each block is paired with the plain block of the same repetition (ratio
and added ms). Peak RSS is measured apart: one subprocess per model and variant
(``--rss-child``) runs that variant alone and reports its own VmHWM and the VmHWM of its
helper processes (wandb-core).

Usage (in the venv that ``make bench-peers`` builds)::

    python benchmarks/peers.py                            # full run, ~8 min on 2 idle cores
    python benchmarks/peers.py --quick --out /tmp/p.json  # smoke run
    python benchmarks/peers.py --models mlp --variants plain,gradwatch,aim --reps 5

See benchmarks/README.md ("peers.py") for what the numbers mean.
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_overhead as core
import peer_variants as pv
import peers_report
import proctree
import thread_settings

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "peers.json"
METRICS: tuple[str, ...] = ("wall", "thread_cpu", "process_cpu", "tree_cpu")
PEER_PACKAGES = ("wandb", "tensorboard", "mlflow", "aim")
RSS_MARK = "PEERS-RSS "


@dataclass
class State:
    """One variant on its own model copy, and what was measured on it."""

    variant: pv.Variant
    timing: core.VariantState  # reuses collector_overhead's timed_steps
    blocks: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in METRICS})
    flush_ms: list[float] = field(default_factory=list)
    setup_ms: list[float] = field(default_factory=list)  # per block for gradwatch
    close_ms: float = 0.0


# -- timing ---------------------------------------------------------------------------------


def make_states(
    work: core.Workload, names: Sequence[str], root: Path, unavailable: dict[str, str]
) -> dict[str, State]:
    """Each available variant on its own copy of the seeded model (setup timed apart)."""
    states: dict[str, State] = {}
    for name in names:
        model = copy.deepcopy(work.model).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        t0 = time.perf_counter()
        try:
            variant = pv.build(name, model, optimizer, root / work.name / name)
        except pv.UnavailableError as e:
            unavailable[name] = str(e)
            print(f"[{work.name}] skipping {name}: {e}", flush=True)
            continue
        timing = core.VariantState(name, model, optimizer, variant.step)
        states[name] = State(variant, timing)
        if not variant.per_block_setup:
            states[name].setup_ms.append((time.perf_counter() - t0) * 1e3)
    return states


def run_block(state: State, work: core.Workload, steps: int, record: bool, settle: int = 0) -> None:
    """One block of one variant: ``settle`` untimed lead-in steps (a fresh gradwatch run's
    first steps do one-time work, see collector_overhead.py), ``steps`` timed ones, then its
    flush; CPU times include the flush."""
    s0 = time.perf_counter()
    state.variant.begin_block()
    if state.variant.per_block_setup and record:
        state.setup_ms.append((time.perf_counter() - s0) * 1e3)
    if settle:
        core.timed_steps(state.timing, work.batches, settle)
    p0, d0 = time.process_time(), proctree.descendants_cpu_s()
    wall, cpu = core.timed_steps(state.timing, work.batches, steps)
    f0 = time.perf_counter()
    state.variant.end_block()
    flush = time.perf_counter() - f0
    process = time.process_time() - p0
    tree = process + proctree.descendants_cpu_s() - d0
    if record:
        state.blocks["wall"].append(statistics.median(wall))
        state.blocks["thread_cpu"].append(statistics.median(cpu))
        state.blocks["process_cpu"].append(process / steps)
        state.blocks["tree_cpu"].append(tree / steps)
        state.flush_ms.append(flush * 1e3)


def bench_model(
    name: str, args: argparse.Namespace, root: Path, unavailable: dict[str, str]
) -> dict[str, Any]:
    """Warm-up, the interleaved repetitions and the closes of one model's variants."""
    t0 = time.perf_counter()
    work = core.make_workload(name, args.batch_size or core.BATCH_SIZE[name])
    print(f"[{name}] {work.description}: {work.n_params:,} parameters, {work.n_tensors} tensors")
    states = make_states(work, args.variants, root, unavailable)
    order = list(states)
    for v in order:
        run_block(states[v], work, args.warmup, record=False)
    loads: list[float] = []
    for rep in range(args.reps):
        k = rep % len(order)
        for v in order[k:] + order[:k]:
            run_block(states[v], work, args.steps, record=True, settle=args.settle)
        loads.append(os.getloadavg()[0])
        line = " ".join(f"{v} {s.blocks['wall'][-1] * 1e3:.1f}" for v, s in states.items())
        took = time.perf_counter() - t0
        print(f"[{name} {took:.0f}s] rep {rep + 1}/{args.reps} ms: {line} (load {loads[-1]:.2f})")
        sys.stdout.flush()
    close_all(states)
    result = summarize(states)
    states.clear()  # drop the trackers: aim flushes its RocksDB containers in finalizers,
    gc.collect()  # which must run before the temporary directory is removed
    result.update(description=work.description, params=work.n_params, tensors=work.n_tensors)
    result["loadavg_1min_per_rep"] = loads
    return result


def close_all(states: dict[str, State]) -> None:
    """Close every variant's run, timed (a one-time cost)."""
    for state in states.values():
        t0 = time.perf_counter()
        state.variant.close()
        state.close_ms = (time.perf_counter() - t0) * 1e3


def summarize(states: dict[str, State]) -> dict[str, Any]:
    """Per variant and metric: median over repetitions, and ratio and added ms paired with
    the plain block of the same repetition (median, min, max)."""
    plain = states["plain"].blocks
    variants: dict[str, Any] = {}
    for name, s in states.items():
        entry: dict[str, Any] = {
            "setup_ms": core._stats(s.setup_ms) if s.setup_ms else None,
            "close_ms": s.close_ms,
            "flush_ms": core._stats(s.flush_ms),
        }
        for metric in METRICS:
            blocks = s.blocks[metric]
            m: dict[str, Any] = {
                "per_rep_ms": [t * 1e3 for t in blocks],
                "median_ms": statistics.median(blocks) * 1e3,
            }
            if name != "plain":
                pairs = list(zip(blocks, plain[metric], strict=True))
                m["ratio_to_plain"] = core._stats([t / p for t, p in pairs])
                m["added_ms"] = core._stats([(t - p) * 1e3 for t, p in pairs])
            entry[metric] = m
        variants[name] = entry
    return {"variants": variants}


# -- peak RSS -------------------------------------------------------------------------------


def rss_child(model: str, variant: str, steps: int, batch_size: int | None) -> None:
    """Run one variant alone for ``steps`` steps; print its peak RSS and its helpers'."""
    work = core.make_workload(model, batch_size or core.BATCH_SIZE[model])
    optimizer = torch.optim.Adam(work.model.parameters(), lr=1e-3)
    with tempfile.TemporaryDirectory(prefix="gradwatch-peers-rss-") as tmp:
        v = pv.build(variant, work.model.train(), optimizer, Path(tmp) / variant)
        v.begin_block()
        for i in range(steps):
            v.step(i, *work.batches[i % len(work.batches)])
        v.end_block()
        helpers = sum(proctree.vmhwm_kib(pid) for pid in proctree.descendants())
        v.close()
        del v
        gc.collect()  # aim flushes its RocksDB containers in finalizers: before tmp goes
        print(RSS_MARK + json.dumps({"self_kib": proctree.vmhwm_kib(), "helpers_kib": helpers}))


def _rss_of(model: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``--rss-child`` process; its output goes to files, not pipes (wandb-core would
    hold a pipe open, and the wait for its end, long after the child exits)."""
    threads = str(torch.get_num_threads())  # the setting being measured
    cmd = [sys.executable, __file__, "--rss-child", model, name, "--threads", threads]
    cmd += ["--rss-steps", str(args.rss_steps)]
    if args.batch_size:
        cmd += ["--batch-size", str(args.batch_size)]
    # without this process's WANDB_SERVICE, the child would hand its work to our wandb-core
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        done = subprocess.run(cmd, stdout=out, stderr=err, env=env, timeout=600, check=False)
        code = done.returncode
        out.seek(0)
        err.seek(0)
        lines = [x for x in out.read().splitlines() if x.startswith(RSS_MARK)]
        if code or not lines:
            return {"error": f"exit {code}: {err.read()[-500:]}"}
    kib = json.loads(lines[-1][len(RSS_MARK) :])
    return {"peak_mib": kib["self_kib"] / 1024, "helpers_mib": kib["helpers_kib"] / 1024}


def measure_rss(model: str, names: Sequence[str], args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS (MiB) of each variant in a process of its own, and of its helper processes;
    two at a time (VmHWM is per process: the neighbour does not change it)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_rss_of, model, name, args) for name in names}
        out = {name: f.result() for name, f in futures.items()}
    base = out.get("plain", {}).get("peak_mib")
    for name, entry in out.items():
        if base is not None and "peak_mib" in entry:
            entry["added_mib"] = entry["peak_mib"] + entry["helpers_mib"] - base
        shown = f"{entry['peak_mib']:.0f} MiB" if "peak_mib" in entry else entry["error"]
        print(f"[{model}] peak RSS {name}: {shown}", flush=True)
    return out


# -- command line ---------------------------------------------------------------------------


def versions() -> dict[str, str | None]:
    """Installed versions of the peer packages (None: not installed)."""
    out: dict[str, str | None] = {}
    for package in PEER_PACKAGES:
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=16, help="repetitions (default 16)")
    p.add_argument("--steps", type=int, default=10, help="steps per block (default 10)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps per variant")
    p.add_argument(
        "--settle", type=int, default=10, help="untimed steps at the start of every block"
    )
    p.add_argument("--models", default=",".join(core.MODELS), help="comma-separated subset")
    p.add_argument("--variants", default=",".join(pv.VARIANTS), help="comma-separated subset")
    p.add_argument("--batch-size", type=int, default=None, help="override the model's batch")
    p.add_argument("--threads", default="default,1,all", help=thread_settings.SPEC_HELP)
    p.add_argument("--rss-steps", type=int, default=20, help="steps of each peak-RSS process")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-RSS processes")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (.md beside it)")
    p.add_argument(
        "--quick", action="store_true", help="smoke run: 2 reps x 3 steps, RSS of one model"
    )
    p.add_argument("--rss-child", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.steps, args.warmup, args.rss_steps, args.settle = 2, 3, 2, 5, 1
    args.models = [m for m in args.models.split(",") if m]
    args.variants = ["plain"] + [v for v in args.variants.split(",") if v and v != "plain"]
    try:
        args.threads = thread_settings.parse(args.threads)
    except ValueError as e:
        p.error(str(e))
    bad = sorted(set(args.models) - set(core.MODELS))
    bad += sorted(set(args.variants) - set(pv.VARIANTS))
    if bad or args.reps < 1 or args.steps < 1:
        p.error(f"unknown models/variants {bad} (or --reps/--steps < 1)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark at each thread setting, print progress, write the JSON and the
    Markdown tables."""
    args = parse_args(argv)
    if args.rss_child:
        torch.set_num_threads(args.threads[0])
        model, variant = args.rss_child
        rss_child(model, variant, args.rss_steps, args.batch_size)
        return 0
    t0 = time.perf_counter()
    runs = [measure(args) for n in args.threads if thread_settings.use(n)]
    md = thread_settings.write(args.out, runs, peers_report.markdown)
    print(md)
    print(f"wrote {args.out} and its .md in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every model and variant at the current thread setting: one run's JSON."""
    unavailable: dict[str, str] = {}
    result: dict[str, Any] = {
        "machine": core.machine_info(),
        "peers": versions(),
        "config": {
            "command": " ".join(["python", "benchmarks/peers.py", *sys.argv[1:]]),
            **{k: getattr(args, k) for k in ("reps", "steps", "warmup", "settle", "rss_steps")},
            "records": pv.RECORDS,
        },
        "unavailable": unavailable,
        "models": {},
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gradwatch-peers-") as tmp:
        for name in args.models:
            entry = bench_model(name, args, Path(tmp), unavailable)
            if not args.no_rss and (name == args.models[0] or not args.quick):
                entry["peak_rss"] = measure_rss(name, list(entry["variants"]), args)
            result["models"][name] = entry
    result["seconds"] = time.perf_counter() - t0
    return result


if __name__ == "__main__":
    sys.exit(main())
