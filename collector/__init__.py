"""gradwatch — catches the PyTorch training bugs that do not crash.

One line attaches it::

    import gradwatch
    run = gradwatch.watch(model, optimizer, project="my-project")

It records per-layer gradient, parameter and update norms, non-finite counts, the
optimizer lifecycle and a reproducibility fingerprint, spools them to disk and streams
them to a gradwatch server. Importing it loads torch and the standard library only.
"""

from gradwatch._version import __version__
from gradwatch.errors import ConfigError, GradwatchError, IntegrityError, WireError
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
