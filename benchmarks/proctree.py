"""CPU time and peak memory of a process tree, from /proc (Linux): the benchmarks of
gradwatch's peers count the helper processes the trackers start (wandb-core, the workers
of ``mlflow server``) with the process that started them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def descendants(root: int | None = None) -> Iterator[int]:
    """Process ids of the live descendants of ``root`` (default: this process)."""
    todo = [os.getpid() if root is None else root]
    first = todo[0]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
            except OSError:
                continue
            todo += [int(c) for c in children]
        if pid != first:
            yield pid


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants_cpu_s(root: int | None = None) -> float:
    """CPU seconds of the live descendants of ``root`` (default: this process)."""
    return sum(cpu_s(pid) for pid in descendants(root))


def vmhwm_kib(pid: int | str = "self") -> int:
    """Peak resident set size (VmHWM) of a process in KiB; 0 when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
