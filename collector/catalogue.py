"""The catalogue of check ids, their default severities and the policies a user can set.

The ids are a public interface (findings, CLI, config, dashboard): never rename one.
"""

from __future__ import annotations

from typing import Final, Literal

Severity = Literal["info", "warning", "error"]
Policy = Literal["off", "record", "warn", "raise", "skip", "checkpoint"]

POLICIES: Final[tuple[Policy, ...]] = ("off", "record", "warn", "raise", "skip", "checkpoint")
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
    # learning rate (gradwatch.checks.lr: definitions and thresholds)
    "lr-jump": "warning",
    "lr-collapse": "warning",
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

#: Checks whose ``raise`` acts in the training thread before an optimizer update is applied
#: (or, for ``amp-overflow``, after a step the GradScaler skipped): only these accept the
#: ``checkpoint`` policy (save the last good state, then raise). The others run after the
#: update, on gradwatch's writer thread, or before training (``nondeterminism-risk``).
CHECKPOINT_CHECKS: Final[frozenset[str]] = frozenset(
    {
        "stale-grad",
        "grad-zeroed-before-step",
        "step-without-backward",
        "param-no-grad",
        "param-not-in-optimizer",
        "frozen-param-in-optimizer",
        "param-mutated-outside-step",
        "nonfinite-loss",
        "nonfinite-grad",
        "amp-overflow",
        "exploding-grad",
        "vanishing-grad",
        "loss-shape-mismatch",
        "eval-mode-training",
    }
)

#: Default policy of every check: findings are recorded and printed once, training goes on.
DEFAULT_POLICY: Final[Policy] = "warn"
