"""``gradwatch lint``: static checks for silent training bugs, before a run starts.

The linter reads Python with :mod:`ast` only (it never imports the code it checks, nor
torch). Rules and their ids are in :mod:`gradwatch.core.lint_catalogue`; ids shared with a
runtime check name the same bug. Example::

    >>> from gradwatch.lint import lint_code
    >>> code = '''
    ... import torch
    ... model = torch.nn.Linear(2, 1)
    ... opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ... for x, y in data:
    ...     torch.nn.functional.mse_loss(model(x), y).backward()
    ...     opt.step()
    ... '''
    >>> [f.rule for f in lint_code(code) if f.severity == "error"]
    ['stale-grad']
"""

from __future__ import annotations

from gradwatch.core.lint_catalogue import BY_ID, IDS, RULES, Rule, confirms
from gradwatch.lint.engine import LintResult, SelectionError, enabled_rules, lint_code, lint_paths
from gradwatch.lint.result import LintFinding

__all__ = [
    "BY_ID",
    "IDS",
    "RULES",
    "LintFinding",
    "LintResult",
    "Rule",
    "SelectionError",
    "confirms",
    "enabled_rules",
    "lint_code",
    "lint_paths",
]
