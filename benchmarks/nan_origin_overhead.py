"""Steady-state cost of NaN provenance (nothing non-finite): gradwatch with it on vs off.

One gradwatch run is attached to one copy of the model for the whole measurement; its
NaN-provenance hooks (:mod:`gradwatch.nan.origin`) are attached or detached *between* timed
steps, so the same run, model and data are timed with and without them. Four variants
alternate step by step in a rotating order:

* ``plain``  the same step on a second model copy with no gradwatch;
* ``off_a``, ``off_b``  the watched model, provenance detached (an A/A pair: the spread of
  ``off_b − off_a`` is the noise of this pairing);
* ``on``  the watched model, provenance attached.

Reported per model: the median of the paired differences ``on − off_a`` and ``off_b −
off_a`` (ms per step) with 95% bootstrap intervals of that median. Provenance is "within
the noise" when its interval overlaps the A/A interval. Workloads and step come from
``collector_overhead.py`` (Adam, cross-entropy, one intra-op thread).

Usage::

    python benchmarks/nan_origin_overhead.py                 # 300 rounds per model
    python benchmarks/nan_origin_overhead.py --quick --out /tmp/n.json
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_overhead as core

import gradwatch

VARIANTS = ("plain", "off_a", "on", "off_b")
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "nan_origin_overhead.json"


def _ci(values: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of the median."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n)]


def hooks_alone(run: gradwatch.Run, x: torch.Tensor, y: torch.Tensor, n: int = 1000) -> float:
    """Training-thread CPU microseconds of provenance's steady-state hooks for one step, run
    without the step (far less noisy than step times): the forward pre-hook and hook, the
    backward listener and, on the CPU, the step pre-hook's screen."""
    origin, w = run.context.nan_origin, run.context.watches[0]
    model = run.context.model_hooks.models[""]
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    w._pre = w.stats.before_step()  # what the step pre-hook finds: the gradient norms
    w.pending.loss = loss.detach()
    samples = []
    for _ in range(5):
        t0 = time.thread_time()
        for _ in range(n):
            origin.before_forward("", (x,), {})
            origin.after_forward("", out)
            origin._after_backward(loss, 0.0, loss)
            origin.screen(w)
            origin.stepped()
        samples.append((time.thread_time() - t0) / n * 1e6)
    w._pre = None
    w.pending.loss = None
    return statistics.median(samples)


def bench(name: str, rounds: int, warmup: int, data_dir: Path) -> dict[str, Any]:
    work = core.make_workload(name, core.BATCH_SIZE[name])
    plain_model = copy.deepcopy(work.model).train()
    plain_opt = torch.optim.Adam(plain_model.parameters(), lr=1e-3)
    model = copy.deepcopy(work.model).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps = {
        "plain": core.plain_step(plain_model, plain_opt),
        "watched": core.plain_step(model, opt),
    }
    run = gradwatch.watch(model, opt, every=1, data_dir=data_dir)
    for thread in run.context.background:
        thread.join()
    origin = run.context.nan_origin
    origin.detach()  # attached by watch(); from here on only around the "on" steps
    origin.on = False  # the model and step hooks call provenance only while it is on
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    i = 0
    try:
        for r in range(warmup + rounds):
            order = VARIANTS[r % 4 :] + VARIANTS[: r % 4]
            for v in order:
                if v == "on":
                    origin.on = True
                    origin.attach()
                x, y = work.batches[i % len(work.batches)]
                i += 1
                step = steps["plain" if v == "plain" else "watched"]
                t0 = time.perf_counter()
                step(i, x, y)
                took = time.perf_counter() - t0
                if v == "on":
                    origin.detach()
                    origin.on = False
                if r >= warmup:
                    times[v].append(took)
        assert origin.replays == 0, "a benchmark step went non-finite"
        hooks_us = hooks_alone(run, *work.batches[0])
    finally:
        run.close()
    on = [a - b for a, b in zip(times["on"], times["off_a"], strict=True)]
    aa = [a - b for a, b in zip(times["off_b"], times["off_a"], strict=True)]
    plain_ms = statistics.median(times["plain"]) * 1e3
    out = {
        "model": work.description,
        "rounds": rounds,
        "plain_ms": plain_ms,
        "off_ms": statistics.median(times["off_a"]) * 1e3,
        "on_minus_off_ms": statistics.median(on) * 1e3,
        "on_minus_off_ci_ms": [x * 1e3 for x in _ci(on)],
        "aa_ms": statistics.median(aa) * 1e3,
        "aa_ci_ms": [x * 1e3 for x in _ci(aa)],
        "hooks_alone_us": hooks_us,
    }
    lo, hi = out["on_minus_off_ci_ms"]
    alo, ahi = out["aa_ci_ms"]
    out["within_noise"] = lo <= ahi and alo <= hi
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# NaN provenance: steady-state overhead",
        "",
        f"{result['machine']['cpu_model']}, {result['machine']['logical_cpus']} logical CPUs, "
        f"torch {result['machine']['torch']}, {result['machine']['torch_num_threads']} thread, "
        f"load average {result['loadavg_before']:.1f} before / {result['loadavg_after']:.1f} "
        f"after, {result['machine']['date']}. Command: `{result['command']}`.",
        "",
        "| model | plain step | gradwatch (provenance off) | on − off (95% CI) | "
        "A/A off − off (95% CI) | within noise | hooks alone (CPU) |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for r in result["models"].values():
        lo, hi = r["on_minus_off_ci_ms"]
        alo, ahi = r["aa_ci_ms"]
        lines.append(
            f"| {r['model']} | {r['plain_ms']:.2f} ms | {r['off_ms']:.2f} ms | "
            f"{r['on_minus_off_ms']:+.3f} ms [{lo:+.3f}, {hi:+.3f}] | "
            f"{r['aa_ms']:+.3f} ms [{alo:+.3f}, {ahi:+.3f}] | "
            f"{'yes' if r['within_noise'] else 'no'} | {r['hooks_alone_us']:.1f} µs |"
        )
    lines += [
        "",
        "Step times are wall-clock medians; the differences are medians of per-round pairs. "
        "*Hooks alone*: training-thread CPU time of provenance's steady-state hooks for one "
        "step, called without the step (median of 5 × 1000).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(core.MODELS))
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="10 rounds of the MLP (smoke run)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    models = ["mlp"] if args.quick else args.models.split(",")
    rounds = 10 if args.quick else args.rounds
    load_before = _load()
    with tempfile.TemporaryDirectory() as tmp:
        results = {m: bench(m, rounds, args.warmup, Path(tmp)) for m in models}
    result = {
        "machine": core.machine_info(),
        "command": " ".join(
            ["python", "benchmarks/nan_origin_overhead.py", *(argv or sys.argv[1:])]
        ),
        "loadavg_before": load_before,
        "loadavg_after": _load(),
        "models": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


def _load() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
