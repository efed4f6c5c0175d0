"""A long server outage costs the collector disk, not memory.

A training process streams to a server address where nothing listens, as fast as it can,
for ``OUTAGE_S`` seconds and at least ``MIN_STEPS`` steps. Its resident memory is sampled
every 100 steps; over the second half of the steps (the first half, and at least
``WARMUP`` steps, is warm-up: torch, gradwatch, the allocator's arenas and the first spool
segments) it may grow by at most ``BOUND_MIB``, while the spool keeps growing on disk and
the sender keeps retrying. Warm-up is counted in steps of the run itself because a fast
machine takes thousands of steps in the seconds a slow one takes hundreds.
"""

from __future__ import annotations

import time
from pathlib import Path

from gradwatch.core.spool import list_segments, segment_path
from tests.faults.harness import Trainer
from tests.server.test_commands import free_port

OUTAGE_S = 10.0
MIN_STEPS = 1500
WARMUP = 500
BOUND_MIB = 4.0


def test_memory_stays_bounded_while_the_server_is_away(tmp_path: Path) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    stop = tmp_path / "stop"
    flags = ("--quiet", "--rss", "--server", nowhere, "--stop-file", str(stop))
    trainer = Trainer(tmp_path / "c", 10**7, 0.0, *flags)
    assert trainer.run_dir.is_dir() and trainer.proc.stdout is not None
    began = time.monotonic()
    early: list[str] = []
    while not early or not early[-1].startswith(f"rss {MIN_STEPS} "):
        early.append(trainer.proc.stdout.readline())
        assert early[-1], "the training ended early"
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - began)))
    stop.touch()
    lines, err, stats = trainer.finish()
    printed = early + lines
    rss = [(int(s), int(k)) for _, s, k in (line.split() for line in printed if line[:4] == "rss ")]
    took = time.monotonic() - began
    steps = rss[-1][0]
    after_warmup = [kib for step, kib in rss if step >= max(WARMUP, steps // 2)]
    growth_mib = (max(after_warmup) - after_warmup[0]) / 1024
    run_dir = trainer.run_dir
    spool = sum(segment_path(run_dir, s).stat().st_size for s in list_segments(run_dir))
    assert stats["dropped_queue"] == stats["dropped_disk"] == 0, err
    assert stats["sent_frames"] == 0 and stats["written"] > 0
    assert growth_mib <= BOUND_MIB, f"RSS grew {growth_mib:.1f} MiB over {steps} steps"
    print(
        f"{steps} steps in {took:.0f} s with the server away: RSS "
        f"{after_warmup[0] / 1024:.1f} -> max {max(after_warmup) / 1024:.1f} MiB "
        f"(+{growth_mib:.2f}), spool {spool / 1024:.0f} KiB on disk"
    )
