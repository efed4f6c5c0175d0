"""Where gradwatch keeps its data on disk.

The data directory is, in order: the explicit ``data_dir`` argument, ``$GRADWATCH_DIR``,
``$XDG_DATA_HOME/gradwatch``, ``~/.local/share/gradwatch``. Each run gets
``<data dir>/runs/<run id>/`` holding its spool segments and its metadata.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

RUNS = "runs"


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the data directory (not created here)."""
    if explicit is not None:
        return Path(explicit).expanduser()
    env = os.environ.get("GRADWATCH_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "gradwatch"


def runs_dir(root: Path) -> Path:
    """The folder holding one sub-folder per run."""
    return root / RUNS


def new_run_id() -> str:
    """A sortable, unique run id such as ``20261130T024512-3f9a2c1d``.

    The random part comes from ``os.urandom`` so that no user-visible RNG is touched.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{os.urandom(4).hex()}"
