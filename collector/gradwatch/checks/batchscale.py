"""Outlier input batches: a batch whose scale is far from the usual one is named as the root
cause of what it does at its step (``details.batch_outlier``, an ``input-batch`` cause).

Every collected step carries the mean absolute value of its floating-point inputs, taken
with the batch checksum (:mod:`gradwatch.stats.batch_checksum`; integer inputs such as token
ids have no scale and are left out). A step's batch is an outlier when, after
``MIN_HISTORY`` earlier batches of the same optimizer, its scale is more than
``DECADES`` decades (a factor 10) *and* ``MADS`` robust deviations (median absolute
deviation of the log-scale, as a standard deviation) away from the median of the last
``WINDOW`` batches. Shuffling, augmentation (random crops, flips, brightness, noise, mixup)
and ragged last batches move the scale by far less than a factor 10; data whose scale
varies that much from batch to batch has a wide robust deviation, and none is an outlier.

An outlier batch is no finding by itself — data varies and a model may absorb it. When a
numeric symptom of the same step and optimizer is found (``SYMPTOMS``), that finding is led
by a clause naming the batch and carries ``details.batch_outlier``; the incident model then
makes it the cause of an ``input-batch`` incident whose consequences follow. When a value
check's policy acts before the update (``raise``, ``skip``, ``checkpoint``), each step's
batch scale is read on the training thread before that step's checks, so those findings
are led by the batch too.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from gradwatch.checks.findings import Finding
from gradwatch.checks.fmt import num, times
from gradwatch.checks.loss import median
from gradwatch.core import checkids

MIN_HISTORY = 20
WINDOW = 100
DECADES = 1.0
MADS = 8.0
#: the findings an outlier batch explains when they are found at its step
SYMPTOMS = frozenset(
    {
        checkids.EXPLODING_GRAD,
        checkids.NONFINITE_LOSS,
        checkids.NONFINITE_GRAD,
        checkids.NONFINITE_PARAM,
        checkids.UPDATE_RATIO,
    }
)
_KEPT = 16  # outlier steps remembered per optimizer (findings of a window come soon after)
_REFRESH = 10  # batches between recomputations of the median and deviation


@dataclasses.dataclass
class _History:
    logs: deque[float] = dataclasses.field(default_factory=lambda: deque(maxlen=WINDOW))
    center: float = 0.0
    spread: float = 0.0  # robust deviation of the log-scale
    since: int = _REFRESH  # batches since center/spread were computed


class BatchScales:
    """Per optimizer: the recent batch scales and the steps whose batch was an outlier."""

    def __init__(self) -> None:
        self._history: dict[int, _History] = {}
        self._outliers: dict[int, dict[int, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def observe(self, o: int, steps: Sequence[int], scales: Sequence[float | None]) -> None:
        """The batch scales of collected steps of optimizer ``o``, in step order (``None``:
        no floating-point input at that step)."""
        history = self._history.get(o)
        if history is None:
            history = self._history[o] = _History()
        for step, scale in zip(steps, scales, strict=True):
            if scale is None or scale == 0 or math.isnan(scale):
                continue
            if math.isinf(scale):
                self._flag(o, step, {"scale": scale, "usual": None, "factor": None})
                continue
            x = math.log10(scale)
            if len(history.logs) >= MIN_HISTORY:
                self._judge(o, step, history, x, scale)
            history.logs.append(x)
            history.since += 1

    def _judge(self, o: int, step: int, h: _History, x: float, scale: float) -> None:
        if h.since >= _REFRESH:
            h.center = center = median(h.logs)
            h.spread = 1.4826 * median([abs(v - center) for v in h.logs])
            h.since = 0
        off = abs(x - h.center)
        if off <= DECADES or off <= MADS * h.spread:
            return
        usual = 10**h.center
        self._flag(o, step, {"scale": scale, "usual": usual, "factor": scale / usual})

    def _flag(self, o: int, step: int, info: dict[str, Any]) -> None:
        with self._lock:
            kept = self._outliers.setdefault(o, {})
            kept[step] = {**info, "step": step}
            while len(kept) > _KEPT:
                del kept[min(kept)]

    def outlier(self, o: int | None, step: int | None) -> dict[str, Any] | None:
        """What was found about the batch of ``step`` of optimizer ``o`` (``None``: nothing)."""
        if o is None or step is None or not self._outliers:
            return None
        with self._lock:
            return self._outliers.get(o, {}).get(step)

    def annotate(self, f: Finding) -> Finding:
        """``f`` led by the outlier batch of its step, when it is a symptom such a batch
        explains (used by the sink on every finding before it is stored)."""
        if f.check not in SYMPTOMS or "batch_outlier" in f.details:
            return f
        info = self.outlier(f.optimizer, f.step)
        if info is None:
            return f
        return dataclasses.replace(
            f, message=f"{clause(info)}; {f.message}", details={**f.details, "batch_outlier": info}
        )


def clause(info: dict[str, Any]) -> str:
    """``the input batch of this step is an outlier (mean |x| 1,000× the usual 0.8)``."""
    if info.get("usual") is None:
        return "the input batch of this step is an outlier (its values overflow to infinity)"
    return (
        f"the input batch of this step is an outlier (mean |x| {num(info['scale'])}, "
        f"{times(info['factor'])} the usual {num(info['usual'])})"
    )
