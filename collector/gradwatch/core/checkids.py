"""The check ids as constants: code names a check by one of these, never by a repeated string.

The ids are a public interface (findings, CLI, config, dashboard): never rename one. Each is
declared by its family's module of :mod:`gradwatch.core.checks` (with the check itself); this
module gathers them in one namespace. Every id of the registry has its constant here and
every constant is an id there (``tests/collector/core/test_checkids.py``). Standard library
only.

Example::

    >>> from gradwatch.core import checkids
    >>> checkids.STALE_GRAD
    'stale-grad'
"""

from __future__ import annotations

from typing import Final

from gradwatch.core.checks.coverage import *  # noqa: F403
from gradwatch.core.checks.data import *  # noqa: F403
from gradwatch.core.checks.ddp import *  # noqa: F403
from gradwatch.core.checks.lifecycle import *  # noqa: F403
from gradwatch.core.checks.lr import *  # noqa: F403
from gradwatch.core.checks.numerics import *  # noqa: F403
from gradwatch.core.checks.repro import *  # noqa: F403
from gradwatch.core.checks.structure import *  # noqa: F403

#: the checks of a non-finite value (loss, gradient, parameter)
NONFINITE: Final = (NONFINITE_LOSS, NONFINITE_GRAD, NONFINITE_PARAM)  # noqa: F405
