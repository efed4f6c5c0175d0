"""The check ids as constants: code names a check by one of these, never by a repeated string.

The ids are a public interface (findings, CLI, config, dashboard): never rename one. Every
id of :data:`gradwatch.core.catalogue.CATALOGUE` has its constant here and every constant
is an id there (``tests/collector/core/test_checkids.py``). Standard library only.

Example::

    >>> from gradwatch.core import checkids
    >>> checkids.STALE_GRAD
    'stale-grad'
"""

from __future__ import annotations

from typing import Final

STALE_GRAD: Final = "stale-grad"
GRAD_ZEROED_BEFORE_STEP: Final = "grad-zeroed-before-step"
STEP_WITHOUT_BACKWARD: Final = "step-without-backward"
CLIP_BEFORE_BACKWARD: Final = "clip-before-backward"
ACCUMULATION_WIPED: Final = "accumulation-wiped"
PARAM_NO_GRAD: Final = "param-no-grad"
PARAM_NOT_IN_OPTIMIZER: Final = "param-not-in-optimizer"
FROZEN_PARAM_IN_OPTIMIZER: Final = "frozen-param-in-optimizer"
PARAM_NOT_UPDATED: Final = "param-not-updated"
FROZEN_PARAM_CHANGED: Final = "frozen-param-changed"
PARAM_MUTATED_OUTSIDE_STEP: Final = "param-mutated-outside-step"
NONFINITE_LOSS: Final = "nonfinite-loss"
NONFINITE_GRAD: Final = "nonfinite-grad"
NONFINITE_PARAM: Final = "nonfinite-param"
AMP_OVERFLOW: Final = "amp-overflow"
EXPLODING_GRAD: Final = "exploding-grad"
VANISHING_GRAD: Final = "vanishing-grad"
UPDATE_RATIO: Final = "update-ratio"
LR_JUMP: Final = "lr-jump"
LR_COLLAPSE: Final = "lr-collapse"
LR_TOO_LARGE: Final = "lr-too-large"
LOSS_SHAPE_MISMATCH: Final = "loss-shape-mismatch"
REPEATED_BATCH: Final = "repeated-batch"
LOSS_AT_CHANCE: Final = "loss-at-chance"
LOSS_DIVERGING: Final = "loss-diverging"
LOSS_PLATEAU: Final = "loss-plateau"
EVAL_MODE_TRAINING: Final = "eval-mode-training"
NONDETERMINISM_RISK: Final = "nondeterminism-risk"
REPRO_DRIFT: Final = "repro-drift"
SEED_ENVELOPE: Final = "seed-envelope"
DDP_PARAM_DESYNC: Final = "ddp-param-desync"
DDP_RANK_SPREAD: Final = "ddp-rank-spread"
DDP_NONFINITE_RANK: Final = "ddp-nonfinite-rank"
STRUCTURE_CHANGE: Final = "structure-change"
STRUCTURE_SAFEGUARD: Final = "structure-safeguard"
GROUP_INVARIANT: Final = "group-invariant"

#: the checks of a non-finite value (loss, gradient, parameter)
NONFINITE: Final = (NONFINITE_LOSS, NONFINITE_GRAD, NONFINITE_PARAM)
