"""The catalogue of check ids, their default severities and the policies a user can set.

The ids are a public interface (findings, CLI, config, dashboard): never rename one.
"""

from __future__ import annotations

from typing import Final, Literal

Severity = Literal["info", "warning", "error"]
Policy = Literal["off", "record", "warn", "raise", "skip"]

POLICIES: Final[tuple[Policy, ...]] = ("off", "record", "warn", "raise", "skip")
SEVERITIES: Final[tuple[Severity, ...]] = ("info", "warning", "error")

#: check id -> default severity (``amp-overflow`` escalates info -> warning -> error itself).
CHECKS: Final[dict[str, Severity]] = {
    # optimizer lifecycle
    "stale-grad": "error",
    "grad-zeroed-before-step": "error",
    "step-without-backward": "warning",
    # parameter coverage
    "param-no-grad": "warning",
    "param-not-in-optimizer": "error",
    "frozen-param-in-optimizer": "warning",
    "param-not-updated": "warning",
    "frozen-param-changed": "warning",
    "param-mutated-outside-step": "info",
    # numerics
    "nonfinite-loss": "error",
    "nonfinite-grad": "error",
    "nonfinite-param": "error",
    "amp-overflow": "info",
    "exploding-grad": "warning",
    "vanishing-grad": "warning",
    "update-ratio": "warning",
    # loss and data
    "loss-shape-mismatch": "error",
    "loss-diverging": "warning",
    "loss-plateau": "info",
    "eval-mode-training": "warning",
    # reproducibility
    "nondeterminism-risk": "info",
    "repro-drift": "warning",
    "seed-envelope": "warning",
    # distributed
    "ddp-param-desync": "error",
    "ddp-rank-spread": "warning",
    "ddp-nonfinite-rank": "error",
}

#: Default policy of every check: findings are recorded and printed once, training goes on.
DEFAULT_POLICY: Final[Policy] = "warn"
