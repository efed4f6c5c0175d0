"""The structure checks (derived by :mod:`gradwatch.core.structure` when the run closes or is
read), declared for the check registry (:mod:`gradwatch.core.registry`)."""

from __future__ import annotations

from typing import Final

from gradwatch.core.registry import Cause, Check, Family

__all__ = [
    "GROUP_INVARIANT",
    "STRUCTURE_CHANGE",
    "STRUCTURE_SAFEGUARD",
]

STRUCTURE_CHANGE: Final = "structure-change"
STRUCTURE_SAFEGUARD: Final = "structure-safeguard"
GROUP_INVARIANT: Final = "group-invariant"

#: steps after a structure change within which it is a candidate cause (five times the
#: window over which gradwatch.core.structure.timeline judges a change)
STRUCTURE_WINDOW: Final = 100

FAMILY: Final = Family(
    __name__,
    "Structure",
    (
        Check(STRUCTURE_CHANGE, "info", "close",
           "The run's structure changed for good at a step (stored by the collector when the "
           "run closes, see [structure.md](structure.md)): a lifecycle event (zero_grad, a "
           "clip, a scheduler step) stops or starts, a tensor stops or starts receiving "
           "gradients, a module enters or leaves eval(), a param group's non-LR "
           "hyperparameter, the dtypes, the autocast state of the training forward, the "
           "schedulers' groups or the GradScaler's part change (autocast switched off is a "
           "change, not a safeguard dropped).",
           "the {timeline.WINDOW} steps before and from the step share no value (fewer at the "
           "run's edges, never fewer than {timeline.SETTLE}); a state value held "
           "{timeline.SETTLE} steps on each side",
           "periodic patterns (accumulation, alternating heads, GAN n_critic, evaluation every N "
           "steps with train() restored, a per-epoch scheduler); a hyperparameter a schedule "
           "moves on every step",
           cause=Cause(
                "structure change", 160, frozenset({"symptom", "stalled"}), window=STRUCTURE_WINDOW
            )),
        Check(STRUCTURE_SAFEGUARD, "warning", "close",
           "A safeguard the run relied on stops for the rest of the run: the clipping call or "
           "the scheduler step is no longer made, or a dropout/normalisation module (or the "
           "model) that trained in train() stays in eval() to the end. Stored by the collector "
           "when the run closes (the end decides \"for the rest of the run\"), so it counts in "
           "the run's status, health and alerts.",
           "a clip or scheduler step that recurred at least {timeline.SETTLE} times with gaps "
           "of at most G steps is absent from the last max(2G, {timeline.WINDOW}) or more steps; "
           "a module in eval() from a change to the run's end",
           "clipping switched on after a warm-up; a scheduler that stops once its learning rates "
           "are flat or back at the base rate it was built for (a warm-up that ended): info",
           cause=Cause("safeguard dropped", 140, frozenset({"symptom", "stalled"}))),
        Check(GROUP_INVARIANT, "warning", "read",
           "A run breaks what held on every step of every good run of its replicate group (same "
           "config and code hash, same layout, finished with no error finding): a tensor that "
           "always (or never) received a gradient, the step lifecycles, a state value (a "
           "hyperparameter, the dtypes, the autocast state, the modules in eval()). Derived "
           "when the run is read (`gradwatch findings`, the server's structure reply), as it "
           "needs the group's other runs: not among the run's stored findings.",
           "the difference lasts {group.PERSIST} steps in a row (or the whole run); at least "
           "{group.MIN_GOOD} good runs",
           "fewer than {group.MIN_GOOD} good runs; runs without a config or code hash, or made "
           "by this run's own process; an element that varied among the good runs",
           cause=Cause("differs from its replicates", 150, frozenset({"symptom", "stalled"}))),
    ),
    constants={
        "timeline": "gradwatch.core.structure.timeline",
        "group": "gradwatch.core.structure.group",
    },
)  # fmt: skip
