"""gradwatch — catches the PyTorch training bugs that do not crash.

One line attaches it::

    import gradwatch
    run = gradwatch.watch(model, optimizer, project="my-project")

It records per-layer gradient, parameter and update norms, non-finite counts, the
optimizer lifecycle and a reproducibility fingerprint, spools them to disk and streams
them to a gradwatch server. Importing it loads the standard library only; torch is loaded
on first use of ``watch`` or ``Run``, so the server (which shares the wire format, the
spool reader and the CLI with the collector) runs in an image without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradwatch._version import __version__
from gradwatch.errors import ConfigError, GradwatchError, IntegrityError, WireError

if TYPE_CHECKING:
    from gradwatch.run import Run
    from gradwatch.watch import watch

__all__ = [
    "ConfigError",
    "GradwatchError",
    "IntegrityError",
    "Run",
    "WireError",
    "__version__",
    "watch",
]


def __getattr__(name: str) -> Any:
    """Load ``watch`` and ``Run`` (and with them torch) on first use."""
    if name == "watch":
        from gradwatch.watch import watch

        return watch
    if name == "Run":
        from gradwatch.run import Run

        return Run
    raise AttributeError(f"module 'gradwatch' has no attribute {name!r}")
