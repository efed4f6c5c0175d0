"""Callbacks for training frameworks; each module imports its framework when imported
itself (``import gradwatch`` never does):

* :mod:`gradwatch.integrations.lightning` — ``GradwatchCallback`` for Lightning's Trainer;
* :mod:`gradwatch.integrations.huggingface` — ``GradwatchCallback`` for the Hugging Face
  Transformers ``Trainer``.

Both take the options of :func:`gradwatch.watch` (validated when the callback is built),
attach when training starts and close the run when it ends.
"""

from __future__ import annotations

from typing import Any

from gradwatch.core.errors import ConfigError
from gradwatch.session.options import OPTIONS, resolve


def checked_options(options: dict[str, Any]) -> dict[str, Any]:
    """Validate ``watch()`` options now, so a bad one fails where the callback is built."""
    unknown = set(options) - OPTIONS
    if unknown:
        raise ConfigError(
            f"GradwatchCallback got unknown option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}"
        )
    resolve(**options)
    return dict(options)


def require(module: str, extra: str = "integrations") -> None:
    """A clear error when the framework of an integration is not installed."""
    raise ImportError(
        f"this gradwatch integration needs {module}: pip install {module} "
        f"(or pip install 'gradwatch[{extra}]')"
    )
