"""Torch ops on gradwatch's own threads run on one intra-op thread.

torch's CPU ops run their parallel regions with OpenMP, and OpenMP gives every thread that
starts a parallel region a team of its own. When gradwatch's writer thread ran a small op
that torch parallelises (``max(dim=1)`` in the window checks, a per-sample sum of the
batch checksum), it got a second team next to the training thread's. With more OpenMP
threads than cores, libgomp's workers stop spinning between parallel regions almost at
once (``GOMP_SPINCOUNT`` is throttled) and must be woken for every region of every
training step: at torch's default thread count on 2 cores, the benchmark transformer's
step took 20 ms longer (47 → 67 ms) for as long as a run was attached, whatever the writer
did. (docs/cost.md, "What made consecutive steps slow", has the measurements.)

:func:`one_thread` sets the OpenMP thread count *of the calling thread only* to one, so
its ops never start a team. ``torch.set_num_threads(1)`` cannot be used: it also sets
torch's process-wide count (which threads started later copy) and its thread pool. The
OpenMP runtime is the one torch loaded (libgomp, Intel's libiomp5 or LLVM's libomp),
reached without loading anything new; where it cannot be found nothing changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

_RUNTIMES = ("libgomp", "libiomp", "libomp")


def _loaded_runtimes() -> list[str]:
    """Paths of the OpenMP runtimes mapped into this process (Linux), else those shipped
    beside torch (opened below only if already loaded)."""
    paths: list[str] = []
    with contextlib.suppress(OSError):
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if os.path.basename(path).startswith(_RUNTIMES) and path not in paths:
                    paths.append(path)
        if paths:
            return paths
    import torch

    root = Path(torch.__file__).parent
    for folder in (root / "lib", root.parent / "torch.libs"):
        with contextlib.suppress(OSError):
            paths += [str(p) for p in sorted(folder.iterdir()) if p.name.startswith(_RUNTIMES)]
    return paths


def one_thread() -> bool:
    """Make torch's CPU ops on the calling thread run without a parallel team; True when
    the thread now sees one intra-op thread (call it first thing on a thread of gradwatch's,
    never on the training thread)."""
    try:
        import torch

        # torch sets this thread's OpenMP count on its first op here (from the process-wide
        # setting): let that happen first, so that it does not undo what follows
        torch.get_num_threads()
        mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0)
        for path in _loaded_runtimes():
            try:
                lib = ctypes.CDLL(path, mode=mode)  # NOLOAD: only a runtime already in use
            except OSError:
                continue
            setter = getattr(lib, "omp_set_num_threads", None)
            if setter is not None:
                setter.argtypes = [ctypes.c_int]
                setter(1)
        return torch.get_num_threads() == 1
    except Exception:  # best effort: the thread works as before
        return False
