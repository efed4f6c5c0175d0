"""Subcommands of the ``gradwatch`` CLI, one module each, discovered by name.

A command module defines ``add_parser(sub)``, which registers its parser with
``set_defaults(func=...)``; ``func(args) -> int`` is the exit status. Modules import only
what their parser needs at import time: the server and anything heavy are imported inside
``func``, so ``gradwatch --help`` stays as light as ``import gradwatch``.
"""

from __future__ import annotations

import argparse
from typing import TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def data_dir_help() -> str:
    """The ``--data-dir`` help of every command: where the default comes from, and what it
    is here and now."""
    from gradwatch.core import paths

    return (
        "data directory (default: $GRADWATCH_DIR, else $XDG_DATA_HOME/gradwatch, else "
        f"~/.local/share/gradwatch; here {paths.data_dir(None)})"
    )
