"""The CPU norm kernel's ranges on new threads against on the calling thread, just after a
torch op (so that torch's intra-op workers are spinning, as they are inside a step).

For each size, ``--reps`` alternating calls of ``Kernel.sumsq(params, snapshot, 2)`` with
the two ranges summed on a second thread (``SPAWN_PER_THREAD = 0``) and one after another
on the calling thread (the same bits): wall µs, min and median. Prints a Markdown table.

    python benchmarks/kernel_threads.py                  # ~1 min
    python benchmarks/kernel_threads.py --sizes 1048576 --reps 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from gradwatch.stats import hostnorms


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1048576,4194304,16777216", help="elements, comma list")
    p.add_argument("--reps", type=int, default=40, help="calls per way and size (default 40)")
    args = p.parse_args(argv)
    kernel, why = hostnorms.load()
    if kernel is None:
        print(f"kernel_threads: no kernel here ({why}); nothing measured", file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    x, w = torch.randn(64, 784), torch.randn(1024, 784)
    print(f"load {os.getloadavg()[0]:.2f}; torch threads 2; µs per call, min / median\n")
    print("| elements | ranges on a second thread | ranges on the calling thread |")
    print("|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        a, b = [torch.randn(n)], [torch.randn(n)]
        times: dict[int, list[float]] = {0: [], 1 << 62: []}
        for _ in range(args.reps):
            for spawn_at in times:
                hostnorms.SPAWN_PER_THREAD = spawn_at
                torch.nn.functional.linear(x, w)  # torch's workers spin after this
                t0 = time.perf_counter()
                kernel.sumsq(a, b, 2)
                times[spawn_at].append((time.perf_counter() - t0) * 1e6)
        cells = [f"{min(v):,.0f} / {statistics.median(v):,.0f}" for v in times.values()]
        print(f"| {n:,} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
