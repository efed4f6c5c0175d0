"""A second OpenMP team in the process slows every training step at torch's default threads.

What made consecutive gradwatch steps slow at 2 threads (issue 23): gradwatch's writer
thread ran small torch ops that torch parallelises (``max(dim=1)`` in the window checks),
so OpenMP gave it a team of its own beside the training thread's. With more OpenMP threads
than cores, libgomp throttles its workers' spinning between parallel regions, and the
training thread's worker then sleeps and must be woken for every region of every step.
gradwatch now runs its own threads' ops on one intra-op thread
(``gradwatch.stats.intraop``).

This script shows it without gradwatch's code in the way: one process, the benchmark's
models at torch's default thread count, blocks in rotating order of

* ``plain``: the training step alone;
* ``plain + 2nd team``: the same, while another Python thread that ran one parallel op
  (``torch.ones(1_000_000).sum()``) is alive (what the writer thread did before the fix);
* ``plain + 1-thread side``: the same, the other thread first set to one intra-op thread
  with ``gradwatch.stats.intraop.one_thread()`` (what the writer does now);
* ``gradwatch``: a fresh gradwatch run (default checks) per block.

Per block: the median wall time of a step, the threads of the process, and per step the
CPU time and the voluntary context switches (sleeps: a worker that stopped spinning) of
the training thread and of torch's workers. The thread counts and switches tell the
mechanism apart even on a loaded machine; the wall times need a quiet one.

Usage::

    python benchmarks/omp_teams.py                     # transformer and MLP, 6 reps
    python benchmarks/omp_teams.py --models transformer --reps 3 --steps 10
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import collector_overhead as core
import save_results
import torch

from gradwatch.stats import intraop

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "omp_teams.json"
VARIANTS = ("plain", "plain + 2nd team", "plain + 1-thread side", "gradwatch")


def _switches(status: str) -> int:
    line = next(x for x in status.splitlines() if x.startswith("voluntary_ctxt"))
    return int(line.split()[1])


def sample() -> dict[int, tuple[int, int]]:
    """Per thread: on-CPU ns and voluntary context switches."""
    out: dict[int, tuple[int, int]] = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
            base = Path(f"/proc/self/task/{tid}")
            ns = int((base / "schedstat").read_text().split()[0])
            out[int(tid)] = (ns, _switches((base / "status").read_text()))
    return out


@contextlib.contextmanager
def side_thread(one: bool) -> Iterator[None]:
    """Another Python thread, alive for the block, that ran one op torch parallelises."""
    ready, done = threading.Event(), threading.Event()

    def body() -> None:
        if one:
            intraop.one_thread()
        torch.ones(1_000_000).sum()
        ready.set()
        done.wait()

    thread = threading.Thread(target=body, name="side", daemon=True)
    thread.start()
    ready.wait()
    try:
        yield
    finally:
        done.set()
        thread.join()


def block(state: core.VariantState, work: core.Workload, steps: int, tmp: Path) -> dict[str, Any]:
    variant = state.name
    if variant == "gradwatch":
        ctx: Any = core.attached(state, tmp)
    elif variant == "plain + 2nd team":
        ctx = side_thread(one=False)
    elif variant == "plain + 1-thread side":
        ctx = side_thread(one=True)
    else:
        ctx = contextlib.nullcontext()
    with ctx:
        core.timed_steps(state, work.batches, 5)
        python_threads = {t.native_id for t in threading.enumerate()}
        training = threading.get_native_id()
        s0 = sample()
        wall, _ = core.timed_steps(state, work.batches, steps)
        s1 = sample()
        n_threads = len(s1)
    workers = [t for t in s1 if t not in python_threads]

    def per_step(tids: list[int], k: int) -> float:
        return sum(s1[t][k] - s0.get(t, (0, 0))[k] for t in tids) / steps

    return {
        "wall_ms": statistics.median(wall) * 1e3,
        "threads": n_threads,
        "training_cpu_ms": per_step([training], 0) / 1e6,
        "training_sleeps": per_step([training], 1),
        "workers_cpu_ms": per_step(workers, 0) / 1e6,
        "workers_sleeps": per_step(workers, 1),
    }


def bench(name: str, reps: int, steps: int, tmp: Path) -> dict[str, Any]:
    work = core.make_workload(name, core.BATCH_SIZE[name])
    states: dict[str, core.VariantState] = {}
    for v in VARIANTS:
        model = copy.deepcopy(work.model).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        states[v] = core.VariantState(v, model, optimizer, core.plain_step(model, optimizer))
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    load: list[float] = []
    for rep in range(reps):
        for v in VARIANTS[rep % len(VARIANTS) :] + VARIANTS[: rep % len(VARIANTS)]:
            rows[v].append(block(states[v], work, steps, tmp))
        load.append(os.getloadavg()[0])
        line = "  ".join(f"{v} {rows[v][-1]['wall_ms']:.1f}" for v in VARIANTS)
        print(f"[{name}] rep {rep + 1}/{reps} wall ms: {line} (load {load[-1]:.1f})", flush=True)
    out: dict[str, Any] = {"model": name, "load": load, "variants": {}}
    for v in VARIANTS:
        out["variants"][v] = {k: statistics.median(r[k] for r in rows[v]) for k in rows[v][0]} | {
            "wall_ms_all": [r["wall_ms"] for r in rows[v]]
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    date, cpu, cpus = m["date"], m["cpu_model"], m["logical_cpus"]
    lines = [
        "# A second OpenMP team and the training step (torch's default threads)",
        "",
        f"{date} · {cpu} ({cpus} logical CPUs) · torch {m['torch']} · gradwatch sources "
        f"{m['gradwatch_sources_sha256']} · {m['torch_num_threads']} intra-op threads · "
        f"`{result['command']}` · {result['reps']} "
        f"repetitions × {result['steps']} steps per variant, rotating order.",
        "",
        "Medians over repetitions. Sleeps: voluntary context switches per step.",
        "",
        "| model | variant | wall ms/step | threads | training CPU ms | training sleeps "
        "| workers CPU ms | workers sleeps | 1-min load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["models"]:
        load = f"{min(r['load']):.1f}–{max(r['load']):.1f}"
        for v, e in r["variants"].items():
            numbers = ("wall_ms", "threads", "training_cpu_ms", "training_sleeps")
            numbers += ("workers_cpu_ms", "workers_sleeps")
            cells = [f"{e[k]:.0f}" if k == "threads" else f"{e[k]:.1f}" for k in numbers]
            lines.append(save_results.row(r["model"], v, *cells, load))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="transformer,mlp")
    p.add_argument("--reps", type=int, default=6)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        models = [bench(m, args.reps, args.steps, Path(tmp)) for m in args.models.split(",")]
    result = {
        "command": " ".join(
            ["python benchmarks/omp_teams.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "reps": args.reps,
        "steps": args.steps,
        "machine": core.machine_info(),
        "models": models,
    }
    save_results.save(args.out, result, markdown(result), indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
