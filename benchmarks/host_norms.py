"""The step statistics on the CPU with the fused kernel (gradwatch.stats.hostnorms) and with the
stock ``torch._foreach_*`` ops, timed inside a real training loop.

One process, one seeded model per variant (collector_overhead's models and batches), Adam,
``torch.set_num_threads(1)``. Each step runs forward and backward untimed, then times
``StepStats.before_step`` (the snapshot copy; the gradient norms are read after the
update, as for ``torch.optim`` optimizers) and ``after_step`` (the norms) around an untimed
``optimizer.step()``. The two variants alternate in blocks of 20 steps, so both see the
same cache and machine state; the first block of each is warm-up. Reported: the median
per step of the snapshot, of the norms and of both, and the kernel's saving.

Usage::

    python benchmarks/host_norms.py                       # ~1 min: results/host_norms.md
    python benchmarks/host_norms.py --models mlp --blocks 10 --out /tmp/h.json
    python benchmarks/host_norms.py --quick --out /tmp/h.json     # smoke run
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_overhead as core
import save_results

from gradwatch.stats import hostnorms
from gradwatch.stats.tensors import StepStats

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "host_norms.json"
VARIANTS = ("kernel", "stock_ops")


def bench_model(name: str, blocks: int, steps: int) -> dict[str, Any]:
    work = core.make_workload(name, core.BATCH_SIZE[name])
    runs: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer, StepStats]] = {}
    for variant in VARIANTS:
        model = copy.deepcopy(work.model).train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        stats = StepStats(list(model.parameters()), torch.device("cpu"), grads_after=True)
        if variant == "stock_ops":
            stats._kernel = None
        elif stats._kernel is None:
            raise SystemExit(f"the kernel is not available here: {hostnorms.load()[1]}")
        runs[variant] = (model, opt, stats)
    times: dict[str, dict[str, list[float]]] = {
        v: {"snapshot": [], "norms": [], "both": []} for v in VARIANTS
    }
    perf = time.perf_counter
    loss_fn = torch.nn.functional.cross_entropy
    for block in range(blocks + 1):
        for variant in VARIANTS if block % 2 == 0 else VARIANTS[::-1]:
            model, opt, stats = runs[variant]
            for j in range(steps):
                x, y = work.batches[(block * steps + j) % len(work.batches)]
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                t0 = perf()
                pre = stats.before_step()
                t1 = perf()
                opt.step()
                t2 = perf()
                stats.after_step(pre)
                t3 = perf()
                if block:  # the first block is warm-up
                    times[variant]["snapshot"].append(t1 - t0)
                    times[variant]["norms"].append(t3 - t2)
                    times[variant]["both"].append((t1 - t0) + (t3 - t2))
    out: dict[str, Any] = {
        "description": work.description,
        "params": work.n_params,
        "tensors": work.n_tensors,
        "steps": blocks * steps,
    }
    for variant in VARIANTS:
        out[variant] = {k: statistics.median(v) * 1e3 for k, v in times[variant].items()}
    out["saved_ms"] = out["stock_ops"]["both"] - out["kernel"]["both"]
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Step statistics on the CPU: fused kernel against stock ops",
        "",
        f"{result['machine']} · torch {result['torch']} · gradwatch sources "
        f"{result['gradwatch_sources_sha256']} · `torch.set_num_threads(1)` · {result['kernel']}",
        "",
        f"`{result['command']}` — median ms per step over {result['blocks']} alternating "
        f"blocks of {result['steps']} steps per variant (after one warm-up block each).",
        "",
        "| model | snapshot: stock / kernel | norms: stock / kernel | both: stock / kernel "
        "| saved |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in result["models"].items():
        s, k = r["stock_ops"], r["kernel"]
        model = f"{name} ({r['params']:,} params, {r['tensors']} tensors)"
        times = [f"{s[part]:.3f} / {k[part]:.3f}" for part in ("snapshot", "norms", "both")]
        lines.append(save_results.row(model, *times, f"{r['saved_ms']:.3f} ms"))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,cnn,transformer")
    p.add_argument("--blocks", type=int, default=30, help="timed blocks per variant")
    p.add_argument("--steps", type=int, default=20, help="steps per block")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--quick", action="store_true", help="smoke run: 2 blocks of 3 steps")
    args = p.parse_args(argv)
    if args.quick:
        args.blocks, args.steps = 2, 3
    torch.set_num_threads(1)
    info = core.machine_info()
    result: dict[str, Any] = {
        "command": "python benchmarks/host_norms.py"
        + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:])),
        "machine": f"{info['cpu_model']} ({info['logical_cpus']} logical CPUs)",
        "gradwatch_sources_sha256": info["gradwatch_sources_sha256"],
        "torch": torch.__version__,
        "kernel": hostnorms.load()[1],
        "blocks": args.blocks,
        "steps": args.steps,
        "models": {},
    }
    for name in args.models.split(","):
        t0 = time.perf_counter()
        result["models"][name] = bench_model(name, args.blocks, args.steps)
        print(f"[{name}] {time.perf_counter() - t0:.0f} s", flush=True)
    save_results.save(args.out, result, markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
