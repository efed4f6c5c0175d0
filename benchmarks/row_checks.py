"""CPU cost of the row checks on gradwatch's I/O thread, per collected step.

On the CPU every collected step becomes one row that the I/O thread checks (gradient,
parameter and update norms, non-finite counts, the loss) while the training thread goes
on; that thread shares the GIL with training, so what it spends per row is taken, in part,
from the training step. Two ways of checking a window of rows are timed on the same rows:

* ``row by row`` — every row through the checks one at a time (the reference path);
* ``window``     — what gradwatch does: runs of rows on which no check would find or clear
  anything are taken together in a few tensor ops; the other rows take the reference path.

The rows are those of a healthy run with what real runs carry along: noisy gradient norms,
a bias whose gradient is zero up to rounding (it feeds a normalisation layer), a weight
matrix whose updates are 3e-5 of its size (a finding of the old ``update-ratio`` range,
healthy since that check flags only updates larger than the weights), a slowly falling
noisy loss. Real ``gradwatch.watch()`` runs, real check engine.

Usage::

    python benchmarks/row_checks.py                  # full run (about a minute)
    python benchmarks/row_checks.py --quick --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradwatch
from gradwatch.stats.rows import LEADING
from gradwatch.stats.tensors import GRAD, NONFINITE, PARAM, UPDATE
from gradwatch.transport.record_builder import StepMeta

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_overhead as core

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "row_checks.json"
TENSORS = (6, 14, 28, 300)  # ~ the core benchmark's MLP, CNN, transformer; a large model
WINDOWS = (8, 64)  # rows per window: a 30 ms step and a 4 ms step, at 0.25 s a window


def model_of(tensors: int) -> nn.Module:
    """``tensors / 2`` small Linear layers: a weight matrix and a bias each."""
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(tensors // 2)])


def healthy_rows(tensors: int, n: int, seed: int) -> tuple[torch.Tensor, list[StepMeta]]:
    """``n`` rows of a healthy run (see the module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    grad = torch.exp(torch.randn(n, tensors, generator=gen, dtype=f64) * 0.4) * 0.1
    grad[:, 1] = torch.rand(n, generator=gen, dtype=f64) * 1e-9  # zero up to rounding
    param = 1.0 + torch.rand(tensors, dtype=f64, generator=gen).expand(n, tensors)
    ratio = torch.exp(torch.randn(n, tensors, generator=gen, dtype=f64) * 0.2) * 1e-3
    ratio[:, 2] = 3e-5  # a weight matrix that barely moves (healthy: no update-ratio finding)
    data = torch.zeros(n, LEADING + 4 * tensors, dtype=f64)
    noise = torch.rand(n, generator=gen, dtype=f64)
    data[:, 0] = 2.0 * torch.exp(-torch.arange(n, dtype=f64) / (5 * n)) + 0.05 * noise
    stats = data[:, LEADING:].view(n, 4, tensors)
    stats[:, GRAD], stats[:, PARAM] = grad, param
    stats[:, UPDATE], stats[:, NONFINITE] = ratio * param, 0.0
    metas = [
        StepMeta(
            step=i + 1,
            n_backward=1,
            lr=[1e-3],
            wall_time=0.01,
            phases=(0.0, 0.0, 0.0),
            events=[],
            has_grad=[True] * tensors,
            has_loss=True,
            batch=[],
            requires_grad=[True] * tensors,
        )
        for i in range(n)
    ]
    return data, metas


def measure(tensors: int, window: int, rows: int, reference: bool, data_dir: Path) -> Any:
    """Training-thread CPU µs per row of checking ``rows`` rows in windows of ``window``."""
    model = model_of(tensors)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    run = gradwatch.watch(model, optimizer, data_dir=data_dir)
    engine, checker = run.context.checks, run.context.watches[0].checker
    if reference:
        engine.row_by_row = True
    one_by_one = 0
    row_path = checker._check_row

    def counted(row: torch.Tensor, meta: StepMeta, done: bool) -> None:
        nonlocal one_by_one
        one_by_one += 1
        row_path(row, meta, done)

    checker._check_row = counted  # type: ignore[method-assign]
    data, metas = healthy_rows(tensors, rows, seed=tensors)
    per_window: list[float] = []
    try:
        for start in range(0, rows, window):
            part, meta = data[start : start + window].clone(), metas[start : start + window]
            c0 = time.thread_time()
            checker.check_rows(part, meta)
            per_window.append((time.thread_time() - c0) / len(meta))
        findings = sorted((f.step, f.check, f.param or "", f.message) for f in engine.sink.findings)
    finally:
        run.close()
    return {
        "us_per_row": statistics.median(per_window[1:] or per_window) * 1e6,
        "rows_one_by_one": one_by_one,
        "findings": findings,
    }


def bench(rows: int, data_dir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for tensors in TENSORS:
        for window in WINDOWS:
            key = f"{tensors}x{window}"
            ref = measure(tensors, window, rows, True, data_dir / f"{key}-ref")
            win = measure(tensors, window, rows, False, data_dir / f"{key}-win")
            if ref["findings"] != win["findings"]:
                raise RuntimeError(f"{key}: the two paths found different things")
            results[key] = {
                "tensors": tensors,
                "window": window,
                "rows": rows,
                "row_by_row_us_per_row": ref["us_per_row"],
                "window_us_per_row": win["us_per_row"],
                "speedup": ref["us_per_row"] / win["us_per_row"],
                "rows_one_by_one": win["rows_one_by_one"],
                "findings": len(win["findings"]),
            }
            r = results[key]
            print(
                f"[{tensors} tensors, {window} rows a window] row by row "
                f"{r['row_by_row_us_per_row']:.1f} µs/row, window "
                f"{r['window_us_per_row']:.1f} µs/row ({r['speedup']:.1f}×; "
                f"{r['rows_one_by_one']} of {rows} rows one by one)",
                flush=True,
            )
    return results


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# gradwatch row checks: window vs row by row",
        "",
        f"{m['date']} · {m['cpu_model']} ({m['logical_cpus']} logical CPUs) · torch {m['torch']}"
        f" · Python {m['python']}",
        "",
        f"`{result['command']}` — the same {result['rows']} healthy rows (noisy gradient"
        " norms, a bias at zero up to rounding, a weight matrix whose updates are 3e-5"
        " of its size, a falling loss) checked in windows by a real run, with every"
        " default check on; CPU time of the checking thread per row, median over windows"
        " (the first window, which starts the histories, left out). Both paths report the"
        " same findings (the script checks).",
        "",
        "| tensors | rows a window | row by row µs/row | window µs/row | speedup "
        "| rows checked one by one | findings |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["results"].values():
        lines.append(
            f"| {r['tensors']} | {r['window']} | {r['row_by_row_us_per_row']:.1f} "
            f"| {r['window_us_per_row']:.1f} | {r['speedup']:.1f}× "
            f"| {r['rows_one_by_one']} of {r['rows']} | {r['findings']} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1024, help="rows per case (default 1024)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (.md beside it)")
    p.add_argument("--quick", action="store_true", help="smoke run: 128 rows")
    args = p.parse_args(argv)
    if args.quick:
        args.rows = 128
    if args.rows < 2 * max(WINDOWS):
        p.error(f"--rows must be at least {2 * max(WINDOWS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gradwatch-rowchecks-") as tmp:
        results = bench(args.rows, Path(tmp))
    result = {
        "command": " ".join(["python", "benchmarks/row_checks.py", *sys.argv[1:]]),
        "rows": args.rows,
        "machine": core.machine_info(),
        "seconds": time.perf_counter() - t0,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {args.out} in {result['seconds']:.0f} s")
    return 0 if all(math.isfinite(r["speedup"]) for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
