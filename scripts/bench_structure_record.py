"""Cost of the collector's structure record (:class:`~gradwatch.core.structure.recorder.Recorder`):
time per step on the I/O thread, memory kept (with ``trace``: tracemalloc, which slows it), time
to judge the steps at close; synthetic steps of 72 tensors, fed in windows of 50.

Usage: python scripts/bench_structure_record.py 100000 [trace]
"""

from __future__ import annotations

import random
import sys
import time
import tracemalloc
from collections.abc import Iterator
from types import SimpleNamespace

from gradwatch.core.structure.recorder import Recorder

T = 72
CLIP = [("clip", 0.0, "clip_grad_norm_"), ("grad_modified", 0.0, "")]
FIRST = [("hparams", 0.0, '{"g0.weight_decay": 0.05}'), ("dtype", 0.0, "params float32")]


def steps(n: int, kind: str) -> Iterator[SimpleNamespace]:
    rng = random.Random(0)
    for i in range(n):
        clipped = not (kind == "clip-dropped" and i >= n // 2)
        events = [("scheduler", 0.0, ""), ("zero_grad", 0.0, ""), ("backward", 0.01, "")]
        events += [*(CLIP if clipped else []), ("step", 0.0, ""), *(FIRST if i == 0 else [])]
        grads = [True] * T
        if kind == "alternating":
            grads[-2:] = [True, False] if i % 2 else [False, True]
        elif kind == "moe-random":
            grads = [rng.random() < 0.7 for _ in range(T)]
        yield SimpleNamespace(step=i + 1, events=events, has_grad=grads, lr=[1e-3 * (1 - i / n)])


def main(n: int, trace: bool) -> None:
    for kind in ("constant", "clip-dropped", "alternating", "moe-random"):
        rows = list(steps(n, kind))
        if trace:
            tracemalloc.start()
        r = Recorder([f"t{j}" for j in range(T)])
        t0 = time.perf_counter()
        for i in range(0, n, 50):
            r.observe(rows[i : i + 50])
        t1 = time.perf_counter()
        kept = tracemalloc.get_traced_memory()[0] if trace else 0
        tracemalloc.stop()
        judged = r.within_bounds()
        t2 = time.perf_counter()
        found = r.findings() if judged else []
        t3 = time.perf_counter()
        print(
            f"{kind:13s} steps={n:,} entries={r.entries:,} kept={kept / 1e6:.2f} MB "
            f"observe={1e6 * (t1 - t0) / n:.1f} us/step judged={judged} close={t3 - t2:.2f} s "
            f"findings={[(f['check'], f['step']) for f in found]}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]), len(sys.argv) > 2)
