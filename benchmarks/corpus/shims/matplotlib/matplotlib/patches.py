"""No-op patches (``Ellipse``, ``Rectangle``, ...; see the package docstring)."""

from __future__ import annotations

from matplotlib import Anything


def __getattr__(name: str) -> Anything:
    if name.startswith("__"):
        raise AttributeError(name)
    return Anything()
