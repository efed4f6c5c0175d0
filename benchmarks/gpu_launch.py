"""Launch-bound GPU benchmark: what gradwatch adds when the CPU's launch loop is the limit.

A small model (``--layers`` residual blocks of LayerNorm, Linear(``--width``) and ReLU,
batch ``--batch``, Adam) runs hundreds of tiny kernels per step, each shorter than its launch:
the GPU waits for the training thread, so any Python work on that thread — or a
gradwatch thread holding the GIL or a core it needs — shows as GPU idle time. Two
variants, ``plain`` and ``gradwatch`` (``watch(every=1)``, default checks; a fresh run per
block, ``watch()`` and ``close()`` outside the timed steps), alternate in blocks of
``--steps`` steps in rotating order over ``--reps`` repetitions, in one process.

Per block:

* **ms/step** — wall time of the block (``perf_counter``, synchronised at its ends) per step;
* **GPU span ms/step** — CUDA events recorded at every step boundary (no per-step sync):
  the device timeline from the first step's start to the last step's end, per step;
* **GPU busy ms/step** — the sum of the durations of the block's device kernels and
  copies, from ``torch.profiler`` over one extra profiled block per variant and
  repetition (the profiler's own cost is not in the other columns);
* **GPU idle ms/step** — wall minus busy: the time the device waited for the host.

Needs a CUDA GPU: without one it says so and exits with status 2, measuring nothing.
``--device cpu`` runs every code path but the CUDA timing as a smoke test (span and busy
are then n/a). ``benchmarks/gpu_all.sh`` runs it with ``gpu_sync.py``.

Usage::

    python benchmarks/gpu_launch.py                 # writes benchmarks/results/gpu_launch.*
    python benchmarks/gpu_launch.py --device cpu --steps 3 --reps 1 --out /tmp/gl
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import gradwatch

RESULTS = Path(__file__).parent / "results"
VARIANTS = ("plain", "gradwatch")
NO_GPU = "gpu_launch: no CUDA GPU here; nothing measured"


class Residual(nn.Module):
    """``x + relu(linear(layernorm(x)))``: a healthy deep stack of small kernels (a plain
    deep ReLU stack has vanishing gradients, which gradwatch rightly reports)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.linear(self.norm(x)))


def make(args: argparse.Namespace, device: torch.device) -> tuple[nn.Module, Any, Any]:
    """The seeded model and one fixed batch on ``device``."""
    torch.manual_seed(0)
    blocks = [Residual(args.width) for _ in range(args.layers)]
    model = nn.Sequential(*blocks, nn.Linear(args.width, 10)).to(device)
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    return model, x, y


def step_fn(model: nn.Module, opt: torch.optim.Optimizer, x: Any, y: Any) -> Callable[[], None]:
    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def block(step: Callable[[], None], n: int, device: torch.device) -> dict[str, float | None]:
    """``n`` timed steps: wall ms/step and, on CUDA, the events' span ms/step."""
    cuda = device.type == "cuda"
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)] if cuda else []
    sync(device)
    t0 = time.perf_counter()
    for i in range(n):
        if cuda:
            events[i].record()
        step()
    if cuda:
        events[n].record()
    sync(device)
    wall = (time.perf_counter() - t0) * 1e3 / n
    span = events[0].elapsed_time(events[n]) / n if cuda else None
    return {"wall_ms": wall, "span_ms": span}


def busy_ms(step: Callable[[], None], n: int, device: torch.device) -> float | None:
    """Device busy ms/step (kernels and copies) over ``n`` profiled steps; None off CUDA."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        sync(device)
    total_us = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total > 0)
    return float(total_us) / 1e3 / n


def run_variant(
    kind: str, state: dict[str, Any], args: argparse.Namespace, device: torch.device, tmp: str
) -> dict[str, float | None]:
    """One block of ``kind`` (gradwatch: a fresh run around it), plus its profiled block."""
    model, opt, step = state["model"], state["opt"], state["step"]
    run = gradwatch.watch(model, opt, every=1, data_dir=tmp) if kind == "gradwatch" else None
    try:
        if run is not None:
            for thread in run.context.background:
                thread.join()
        for _ in range(args.settle):
            step()
        out = block(step, args.steps, device)
        out["busy_ms"] = busy_ms(step, args.steps, device)
    finally:
        if run is not None:
            run.close()
    if out["busy_ms"] is not None and out["wall_ms"] is not None:
        out["idle_ms"] = out["wall_ms"] - out["busy_ms"]
    else:
        out["idle_ms"] = None
    return out


def measure(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Every repetition of both variants; per variant, each block's figures."""
    states: dict[str, dict[str, Any]] = {}
    for kind in VARIANTS:
        model, x, y = make(args, device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        states[kind] = {"model": model, "opt": opt, "step": step_fn(model, opt, x, y)}
    blocks: dict[str, list[dict[str, float | None]]] = {k: [] for k in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="gradwatch-gpu-launch-") as tmp:
        for kind in VARIANTS:  # warm-up: allocator, cuBLAS handles, Adam state, kernel cache
            run_variant(kind, states[kind], args, device, tmp)
        for rep in range(args.reps):
            order = VARIANTS[rep % 2 :] + VARIANTS[: rep % 2]
            for kind in order:
                blocks[kind].append(run_variant(kind, states[kind], args, device, tmp))
            line = "  ".join(f"{k} {blocks[k][-1]['wall_ms']:.3f}" for k in VARIANTS)
            print(f"rep {rep + 1}/{args.reps}  ms/step: {line}", flush=True)
    return blocks


def summarize(blocks: dict[str, list[dict[str, float | None]]]) -> dict[str, Any]:
    """Median per variant and metric, and gradwatch − plain per repetition (median, range)."""
    out: dict[str, Any] = {}
    for metric in ("wall_ms", "span_ms", "busy_ms", "idle_ms"):
        vals = {k: [v for b in bs if (v := b[metric]) is not None] for k, bs in blocks.items()}
        if any(len(vals[k]) != len(blocks[k]) or not vals[k] for k in vals):
            out[metric] = None  # not measured here (CUDA-only figures on the CPU)
            continue
        added = [g - p for g, p in zip(vals["gradwatch"], vals["plain"], strict=True)]
        out[metric] = {
            **{k: statistics.median(v) for k, v in vals.items()},
            "added": {"median": statistics.median(added), "min": min(added), "max": max(added)},
        }
    return out


def markdown(report: dict[str, Any]) -> str:
    """The summary as a Markdown table."""
    cfg = report["config"]
    lines = [
        f"# Launch-bound GPU step: plain and gradwatch ({report['device']})",
        "",
        f"{report['date']} · torch {report['torch']} · gradwatch {report['gradwatch']} ·"
        f" `{cfg['command']}` · {cfg['layers']} residual blocks (LayerNorm, Linear({cfg['width']}),"
        f" ReLU), batch"
        f" {cfg['batch']}, Adam · {cfg['reps']} repetitions × {cfg['steps']} steps per"
        " variant, rotating order, one process.",
        "",
        "Medians over repetitions (ms per step); added = gradwatch − plain of the same"
        " repetition, median [min, max]. Idle = wall − device busy (profiled block).",
        "",
        "| metric | plain | gradwatch | added |",
        "|---|---:|---:|---:|",
    ]
    for metric, e in report["summary"].items():
        if e is None:
            lines.append(f"| {metric} | n/a | n/a | n/a |")
            continue
        a = e["added"]
        lines.append(
            f"| {metric} | {e['plain']:.3f} | {e['gradwatch']:.3f} "
            f"| {a['median']:+.3f} [{a['min']:+.3f}, {a['max']:+.3f}] |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu for a smoke run")
    ap.add_argument("--layers", type=int, default=16, help="residual blocks (default 16)")
    ap.add_argument("--width", type=int, default=256, help="layer width (default 256)")
    ap.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    ap.add_argument("--steps", type=int, default=100, help="timed steps per block (default 100)")
    ap.add_argument("--settle", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--reps", type=int, default=10, help="repetitions (default 10)")
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu_launch", help="path sans suffix")
    args = ap.parse_args(argv)
    if min(args.layers, args.width, args.batch, args.steps, args.reps) < 1 or args.settle < 0:
        ap.error("--layers, --width, --batch, --steps and --reps must be >= 1, --settle >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        return 2
    blocks = measure(args, device)
    report = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else "CPU " + (platform.processor() or platform.machine()),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "torch": torch.__version__,
        "gradwatch": gradwatch.__version__,
        "config": {
            "command": " ".join(["python", "benchmarks/gpu_launch.py", *sys.argv[1:]]),
            **{k: getattr(args, k) for k in ("layers", "width", "batch", "steps", "reps")},
        },
        "blocks": blocks,
        "summary": summarize(blocks),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    md = markdown(report)
    args.out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
