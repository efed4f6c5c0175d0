"""No-op pyplot (see the package docstring).

`MPL_SHIM_EXIT_AFTER_PAUSES=N` ends the program (exit status 0) at its N-th `pause`: for a
script whose only step cap is a literal but which draws its progress as it goes (e.g. every
1,000 iterations), that is the corpus's way to run it shorter, unmodified."""

from __future__ import annotations

import os
import sys
from typing import Any

from matplotlib import Anything

_pauses = 0


def pause(interval: float = 0.0) -> None:
    global _pauses
    _pauses += 1
    limit = os.environ.get("MPL_SHIM_EXIT_AFTER_PAUSES")
    if limit is not None and _pauses >= int(limit):
        print(f"[matplotlib shim] pause {_pauses}, the limit; ending the program", flush=True)
        sys.stdout.flush()
        raise SystemExit(0)


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Anything, Anything]:
    return Anything(), Anything()


def __getattr__(name: str) -> Anything:
    if name.startswith("__"):
        raise AttributeError(name)
    return Anything()
