"""The reproducibility checks (the fingerprint's risks, and drift between replicates computed by
the server or ``gradwatch compare``), declared for the check registry
(:mod:`gradwatch.core.registry`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.registry import Check, Family

__all__ = [
    "NONDETERMINISM_RISK",
    "REPRO_DRIFT",
    "SEED_ENVELOPE",
]

NONDETERMINISM_RISK: Final = "nondeterminism-risk"
REPRO_DRIFT: Final = "repro-drift"
SEED_ENVELOPE: Final = "seed-envelope"

FAMILY: Final = Family(
    __name__,
    "Reproducibility",
    (
        Check(NONDETERMINISM_RISK, "info", "start",
           "The fingerprint shows settings that make replicates differ (determinism off on an "
           "accelerator, cuDNN benchmark, unseeded DataLoader workers, no seed).",
           "read once at the start",
           "runs that set seeds and deterministic algorithms",
           confirms=("unseeded-run",)),
        Check(REPRO_DRIFT, "warning", "read",
           "A replicate (same config and code hash) diverged from its reference: first step, "
           "first metric and tensor, and the cause (environment, config, code, init, data-order, "
           "forward-nondeterminism, backward-nondeterminism, optimizer-nondeterminism).",
           "the first bitwise difference (computed by the server or `gradwatch compare`)",
           "runs with different seeds (those form a seed sweep)"),
        Check(SEED_ENVELOPE, "warning", "read",
           "In a seed sweep, a run leaves the group's envelope.",
           "robust z-score > 4 on the loss, with at least {envelope.MIN_RUNS} runs",
           "groups of fewer than {envelope.MIN_RUNS} runs"),
    ),
    constants={
        "envelope": "gradwatch.core.drift.envelope",
    },
)  # fmt: skip
