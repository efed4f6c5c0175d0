"""The writer thread's CPU time per window of rows, replayed apart from training.

A gradwatch run trains ``--steps`` steps of one of the models of
``collector_overhead.py`` with ``transfer_every=K`` (windows of exactly K rows); the jobs
it hands to its writer thread (lay the rows out, check them, build and spool the STEPS
record) are captured instead of queued, then run one after another on this thread, each
timed with ``time.thread_time()`` (its CPU time alone: no GIL waits, no other thread). The
first fifth of the windows (histories starting) are left out. Two window sizes separate a
window's fixed cost from its cost per row: cost(K) = fixed + K x per row.

To compare two source trees, run it with each on ``PYTHONPATH`` (e.g. a link
``/tmp/base/gradwatch -> <other checkout>/collector``)::

    python benchmarks/writer_replay.py                       # cnn,mlp,transformer at K=5,80
    python benchmarks/writer_replay.py --models cnn --sizes 20 --steps 400

Replayed alone, the jobs run with warm caches and a core of their own; beside training
the same work takes several times the CPU (see docs/cost.md).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_overhead as core

import gradwatch
from gradwatch.core.wire import Record
from gradwatch.stats import intraop
from gradwatch.transport import writer as writer_mod


def replay(name: str, window: int, steps: int) -> list[float]:
    """CPU seconds of each captured writer job of a ``steps``-step run, in order."""
    captured: list[tuple[writer_mod.RunIO, object]] = []
    submit = writer_mod.RunIO.submit

    def capture(self: writer_mod.RunIO, item: object) -> None:
        if callable(item) and not isinstance(item, Record):
            captured.append((self, item))
        else:
            submit(self, item)  # type: ignore[arg-type]

    work = core.make_workload(name, core.BATCH_SIZE[name])
    model = copy.deepcopy(work.model).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = core.plain_step(model, optimizer)
    with tempfile.TemporaryDirectory() as tmp:
        run = gradwatch.watch(model, optimizer, data_dir=tmp, transfer_every=window)
        writer_mod.RunIO.submit = capture  # type: ignore[method-assign]
        try:
            for i in range(steps):
                step(i, *work.batches[i % len(work.batches)])
        finally:
            writer_mod.RunIO.submit = submit  # type: ignore[method-assign]
        times = []
        for io, job in captured:
            t0 = time.thread_time()
            io._write_one(job)  # type: ignore[arg-type]
            times.append(time.thread_time() - t0)
        run.close()
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="cnn,mlp,transformer")
    p.add_argument("--sizes", default="5,80", help="rows per window (comma-separated)")
    p.add_argument("--steps", type=int, default=800)
    args = p.parse_args()
    torch.set_num_threads(1)
    intraop.one_thread()
    print(f"gradwatch from {Path(gradwatch.__file__).parent}")
    print("| model | rows per window | windows | writer CPU ms per window | per row |")
    print("|---|---:|---:|---:|---:|")
    for name in args.models.split(","):
        for k in (int(x) for x in args.sizes.split(",")):
            times = replay(name, k, args.steps)
            kept = times[len(times) // 5 :]
            ms = statistics.median(kept) * 1e3
            print(f"| {name} | {k} | {len(kept)} | {ms:.3f} | {ms / k:.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
