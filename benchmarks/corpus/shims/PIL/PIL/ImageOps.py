# ruff: noqa: N999 (the package is named as the one it stands in for)
"""`PIL.ImageOps` of the stand-in: importable (swa_gaussian's joint transforms import it for
the CamVid segmentation data, which the corpus does not use); every operation refuses."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError("Pillow is not installed: the corpus's PIL stand-in has no ImageOps")

    return refuse
