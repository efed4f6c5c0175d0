"""No-op pyplot (see the package docstring)."""

from __future__ import annotations

from typing import Any

from matplotlib import Anything


def subplots(nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Anything, Anything]:
    return Anything(), Anything()


def __getattr__(name: str) -> Anything:
    if name.startswith("__"):
        raise AttributeError(name)
    return Anything()
