"""gradwatch corpus shim: matplotlib is not installed in the gradwatch environment and the
corpus runs headless, so every plotting call is accepted and draws nothing. Only for
programs whose plots are a side show of their training."""

from __future__ import annotations

from typing import Any

__version__ = "0.0+gradwatch.shim"


class Anything:
    """Stands for any figure, axes, artist or colour: every call, attribute and item is
    another `Anything`; it iterates as empty and counts as a number where one is asked."""

    def __call__(self, *args: Any, **kwargs: Any) -> Anything:
        return Anything()

    def __getattr__(self, name: str) -> Anything:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything()

    def __getitem__(self, key: Any) -> Anything:
        return Anything()

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(())

    def __len__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __int__(self) -> int:
        return 0

    def __enter__(self) -> Anything:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def use(*args: Any, **kwargs: Any) -> None:
    pass


def __getattr__(name: str) -> Anything:
    if name.startswith("__"):
        raise AttributeError(name)
    return Anything()
