"""The optional packages of the analysis API, imported on first use.

``import gradwatch`` and training never load pandas or Plotly; the read API loads them when
it is first called and, when one is missing, says which extra installs it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {
    "pandas": "pip install 'gradwatch[analysis]'",
    "plotly": "pip install 'gradwatch[analysis]'",
    "numpy": "pip install 'gradwatch[analysis]'",
    "pyarrow": "pip install pyarrow",
}


def require(name: str, purpose: str = "the gradwatch analysis API") -> ModuleType:
    """The module ``name``; ``ImportError`` naming the install command when it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        fix = EXTRAS.get(name, f"pip install {name}")
        raise ImportError(f"{purpose} needs {name}, which is not installed; {fix}") from exc
