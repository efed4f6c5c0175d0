"""The no-op pyplot of the matplotlib stand-in (see the package's docstring)."""

from __future__ import annotations

import os
import sys
from typing import Any

_pauses = 0


class _Anything:
    """What a pyplot call returns: any attribute, call, index or unpacking gives another."""

    def __getattr__(self, name: str) -> _Anything:
        return _Anything()

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return _Anything()

    def __getitem__(self, key: Any) -> _Anything:
        return _Anything()

    def __iter__(self) -> Any:
        return iter((_Anything(), _Anything()))


def pause(interval: float = 0.0) -> None:
    global _pauses
    _pauses += 1
    limit = os.environ.get("MPL_SHIM_EXIT_AFTER_PAUSES")
    if limit is not None and _pauses >= int(limit):
        print(f"[matplotlib shim] pause {_pauses}, the limit; ending the program", flush=True)
        sys.stdout.flush()
        raise SystemExit(0)


def subplots(*args: Any, **kwargs: Any) -> tuple[_Anything, _Anything]:
    return _Anything(), _Anything()


def __getattr__(name: str) -> Any:
    return _Anything()
