"""The catalogue of check ids, their default severities and the policies a user can set.

The checks are declared by their families (:mod:`gradwatch.core.checks`, one module each) and
gathered by the registry (:mod:`gradwatch.core.registry`); this module is the registry's view
that options, findings and the server's alert rules read. The ids are a public interface
(findings, CLI, config, dashboard): never rename one.
"""

from __future__ import annotations

from typing import Final, Literal

from gradwatch.core.checks import REGISTRY
from gradwatch.core.contract import Severity
from gradwatch.core.registry import Check

__all__ = [
    "CATALOGUE",
    "CHECKPOINT_CHECKS",
    "CHECKS",
    "DEFAULT_POLICY",
    "POLICIES",
    "Check",
    "Policy",
]

Policy = Literal["off", "record", "warn", "raise", "skip", "checkpoint"]

POLICIES: Final[tuple[Policy, ...]] = ("off", "record", "warn", "raise", "skip", "checkpoint")

#: Every check, in the order of the documentation. The ids are a public interface.
CATALOGUE: Final[tuple[Check, ...]] = REGISTRY.checks

#: check id -> default severity (``amp-overflow`` escalates info -> warning -> error itself).
CHECKS: Final[dict[str, Severity]] = REGISTRY.severities

#: Checks whose ``raise`` acts in the training thread before an optimizer update is applied
#: (or, for ``amp-overflow``, after a step the GradScaler skipped): the checks of stage
#: ``before-update``. Only these accept the ``checkpoint`` policy (save the last good state,
#: then raise). The others run after the update, on gradwatch's writer thread, before
#: training (``nondeterminism-risk``), at the close, or when a run is read.
CHECKPOINT_CHECKS: Final[frozenset[str]] = REGISTRY.at("before-update")

#: Default policy of every check: findings are recorded and printed once, training goes on.
DEFAULT_POLICY: Final[Policy] = "warn"
