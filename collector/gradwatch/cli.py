"""The ``gradwatch`` command line. Each subcommand is a module of :mod:`gradwatch.commands`,
found by name, so adding a command touches no shared file."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable, Sequence

from gradwatch import commands
from gradwatch._version import __version__

Command = Callable[[argparse.Namespace], int]


def command_names() -> list[str]:
    """Every subcommand module, sorted."""
    return sorted(
        m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")
    )


def build_parser() -> argparse.ArgumentParser:
    """The full parser (used by tests to check that every subcommand has ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="gradwatch", description="Training-run integrity monitor for PyTorch."
    )
    parser.add_argument("--version", action="version", version=f"gradwatch {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in command_names():
        importlib.import_module(f"gradwatch.commands.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gradwatch`` script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Command | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
