"""A real training loop under gradwatch, driven by the fault tests.

Usage: python train_loop.py DATA_DIR STEPS [SLEEP_S] [--server URL] [--stop-file PATH]
[--name N] [--rss] [--quiet]. Prints ``run <dir>`` and ``watch_ms <wall ms> <cpu ms>``
(what ``watch()`` took) once, then ``step <n> <monotonic time>`` after every optimizer
step (with ``--rss`` also ``rss <n> <KiB>``; none with ``--quiet``), then ``done <steps>``
and the I/O stats. It stops after STEPS steps, or as soon as the stop file exists.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch import nn

import gradwatch


def rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("steps", type=int)
    p.add_argument("pause", type=float, nargs="?", default=0.0)
    p.add_argument("--server")
    p.add_argument("--stop-file")
    p.add_argument("--name")
    p.add_argument("--rss", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no step lines (nobody reads them)")
    p.add_argument(
        "--close-timeout",
        type=float,
        default=30.0,
        help="seconds close() waits for the sender (what it has not sent by then stays spooled)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    watch = gradwatch.watch  # loads gradwatch's collector modules (what `import` did before)
    t0, c0 = time.perf_counter(), time.process_time()
    run = watch(
        model, opt, data_dir=args.data_dir, project="faults", server=args.server, name=args.name
    )
    watch_ms = (time.perf_counter() - t0) * 1000
    cpu_ms = (time.process_time() - c0) * 1000  # every thread of the process
    print(f"run {run.dir}", flush=True)
    print(f"watch_ms {watch_ms:.2f} {cpu_ms:.2f}", flush=True)
    for step in range(1, args.steps + 1):
        opt.zero_grad()
        # fresh random targets: the loss stays near its noise floor however long the loop
        # runs (a loss driven to zero ends in vanishing gradients and a storm of findings)
        loss = (model(torch.randn(16, 32)) - torch.randn(16, 8)).pow(2).mean()
        loss.backward()
        opt.step()
        if not args.quiet:
            print(f"step {step} {time.monotonic()}", flush=True)
        if args.rss and step % 100 == 0:
            print(f"rss {step} {rss_kib()}", flush=True)
        if args.pause:
            time.sleep(args.pause)
        if args.stop_file and os.path.exists(args.stop_file):
            break
    run.close(timeout=args.close_timeout)
    print(f"done {step}", flush=True)
    print("stats " + json.dumps(run.context.io.stats.__dict__), flush=True)


if __name__ == "__main__":
    main()
