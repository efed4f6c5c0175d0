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
import sys
import types
import typing

from gradwatch._version import __version__
from gradwatch.errors import ConfigError, GradwatchError, IntegrityError, WireError

if typing.TYPE_CHECKING:
    from gradwatch.analysis import open_run, runs
    from gradwatch.run import Run
    from gradwatch.watch import watch

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
_LAZY = {"Run": "run", "watch": "watch", "open_run": "analysis", "runs": "analysis"}


class _Package(types.ModuleType):
    """Keeps ``gradwatch.watch`` the function: importing the submodule of the same name
    (which Python binds on its package) must not replace it."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
