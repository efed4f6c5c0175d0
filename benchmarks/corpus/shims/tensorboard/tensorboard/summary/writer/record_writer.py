"""Part of the no-op tensorboard stand-in: a record writer that writes nothing."""

from typing import Any


class RecordWriter:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def write(self, data: bytes) -> None:
        return None

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None
