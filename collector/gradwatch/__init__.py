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

import importlib
import typing

from gradwatch._version import __version__
from gradwatch.core.errors import ConfigError, GradwatchError, IntegrityError, WireError

if typing.TYPE_CHECKING:
    from gradwatch.analysis import open_run, runs
    from gradwatch.session.attach import watch
    from gradwatch.session.handle import Run

__all__ = [
    "ConfigError",
    "GradwatchError",
    "IntegrityError",
    "Run",
    "WireError",
    "__version__",
    "open_run",
    "runs",
    "watch",
]


# name -> the module that defines it; each is imported on first use
_LAZY = {
    "Run": "session.handle",
    "watch": "session.attach",
    "open_run": "analysis",
    "runs": "analysis",
}


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def __getattr__(name: str) -> typing.Any:
    """Load ``watch`` and ``Run`` (and with them torch), ``open_run`` and ``runs`` (and,
    when called, pandas) on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'gradwatch' has no attribute {name!r}")
    module = importlib.import_module(f"gradwatch.{_LAZY[name]}")
    value: typing.Any = getattr(module, name)
    globals()[name] = value
    return value
