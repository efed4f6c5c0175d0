"""A no-op stand-in for `tensorboard` so that `torch.utils.tensorboard.SummaryWriter` imports
and accepts every logging call without writing anything (the corpus does not install
tensorboard and reads no event files).

`torch.utils.tensorboard` imports `tensorboard`, checks its version, then imports its own
`writer` module, which needs tensorboard's protobufs; this package registers a small
`torch.utils.tensorboard.writer` in `sys.modules` first, so that import finds it instead.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import types
from typing import Any

__version__ = "2.16.2"


class SummaryWriter:
    """Takes every `add_*`, `flush` and `close` call and keeps nothing; like the real one it
    creates its log folder (default ``runs/<date>_<host><comment>``), where some programs
    write their own files."""

    def __init__(
        self, log_dir: str | None = None, comment: str = "", *args: Any, **kwargs: Any
    ) -> None:
        if not log_dir:
            stamp = datetime.datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)

    def __getattr__(self, name: str) -> Any:
        def ignore(*args: Any, **kwargs: Any) -> None:
            return None

        return ignore

    def get_logdir(self) -> str:
        return self.log_dir

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


FileWriter = SummaryWriter

_writer = types.ModuleType("torch.utils.tensorboard.writer")
_writer.SummaryWriter = SummaryWriter  # type: ignore[attr-defined]
_writer.FileWriter = FileWriter  # type: ignore[attr-defined]
sys.modules.setdefault("torch.utils.tensorboard.writer", _writer)
