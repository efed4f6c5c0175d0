"""Runs the rules over files and folders."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradwatch.core.lint_catalogue import IDS
from gradwatch.lint.analysis import Analysis
from gradwatch.lint.result import LintFinding
from gradwatch.lint.rules import cuts, dataflow, flags, lifecycle, modes, setup
from gradwatch.lint.source import Source

_RULE_MODULES = (lifecycle, modes, dataflow, cuts, flags, setup)
_SKIP_DIRS = {".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", "build", "dist"}


class SelectionError(ValueError):
    """An unknown rule id in ``--select`` / ``--ignore``."""


@dataclass
class LintResult:
    """Findings of a lint pass, the files read, and the files that could not be read."""

    findings: list[LintFinding] = field(default_factory=list)
    files: int = 0
    errors: list[str] = field(default_factory=list)

    def shown(self, suppressed: bool = False) -> list[LintFinding]:
        """The findings to report (suppressed ones only when asked)."""
        return [f for f in self.findings if suppressed or not f.suppressed]


def enabled_rules(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> set[str]:
    """The rule ids left by ``select`` (default: all) minus ``ignore``; unknown ids raise."""
    chosen, dropped = _ids(select), _ids(ignore)
    unknown = sorted((chosen | dropped) - set(IDS))
    if unknown:
        raise SelectionError(
            f"unknown rule id {', '.join(unknown)}; known ids: {', '.join(IDS)} "
            "(gradwatch lint --list-rules describes them)"
        )
    return (chosen or set(IDS)) - dropped


def _ids(values: Iterable[str]) -> set[str]:
    return {i.strip() for v in values for i in v.split(",") if i.strip()}


def lint_source(
    src: Source, enabled: set[str] | None = None, selected: set[str] | None = None
) -> list[LintFinding]:
    """The findings of every enabled rule on one parsed file, in line order. Rules in
    ``selected`` (named by the user) report ``info`` findings as warnings."""
    analysis = Analysis(src, set(IDS) if enabled is None else enabled, selected)
    for module in _RULE_MODULES:
        module.check(analysis)
    return sorted(analysis.findings.values(), key=lambda f: (f.line, f.col, f.rule))


def lint_code(code: str, path: str = "<string>", **kw: set[str]) -> list[LintFinding]:
    """Lint Python source text (``SyntaxError`` when it is not Python)."""
    return lint_source(Source.parse(code, path), kw.get("enabled"), kw.get("selected"))


def python_files(paths: Sequence[str | Path]) -> Iterator[Path]:
    """Every ``.py`` file named or found below the folders named (hidden and virtualenv
    folders skipped); a missing path raises ``FileNotFoundError``."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(".py"):
                        yield Path(root) / name
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"no such file or folder: {raw}")


def lint_paths(
    paths: Sequence[str | Path],
    enabled: set[str] | None = None,
    selected: set[str] | None = None,
) -> LintResult:
    """Lint files and folders; unreadable or unparsable files are listed in ``errors``.
    ``selected``: the rules the user named (``--select``), whose info findings become
    warnings."""
    result = LintResult()
    for path in python_files(paths):
        result.files += 1
        try:
            src = Source.read(path)
        except SyntaxError as exc:
            result.errors.append(f"{path}:{exc.lineno or 0}: cannot parse: {exc.msg}")
            continue
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            result.errors.append(f"{path}: cannot read: {exc}")
            continue
        try:
            result.findings += lint_source(src, enabled, selected)
        except RecursionError:
            result.errors.append(f"{path}: nested too deeply to analyse")
        except Exception as exc:  # a linter bug must not hide the other files' findings
            result.errors.append(
                f"{path}: internal error in gradwatch lint ({type(exc).__name__}: {exc}); "
                "please report it with this file"
            )
    return result
