"""A no-op stand-in for `matplotlib` (not installed for the corpus): every pyplot call is
accepted and draws nothing, `savefig` writes nothing.

`MPL_SHIM_EXIT_AFTER_PAUSES=N` ends the program (exit status 0) at its N-th `pyplot.pause`:
for a script whose only step cap is a literal but which draws its progress as it goes
(e.g. every 1,000 iterations), that cap is the corpus's way to run it shorter unmodified.
"""

from __future__ import annotations

from typing import Any

__version__ = "3.8.0"


def use(*args: Any, **kwargs: Any) -> None:
    return None


def __getattr__(name: str) -> Any:
    from matplotlib import pyplot

    return getattr(pyplot, name)
