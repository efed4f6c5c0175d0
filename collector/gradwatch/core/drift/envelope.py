"""The seed envelope of a group of runs, and the runs that leave it (``seed-envelope``).

Runs with the same config and code but different seeds should have losses that scatter
around a common curve. Per step, over the runs that logged a loss there, the envelope is
the median ± ``z`` robust standard deviations (1.4826 × the median absolute deviation). A
run *leaves* the envelope when its robust z-score exceeds ``z`` (default 4) on ``steps``
(default 20) consecutive steps. The scale has a floor of ``floor`` × |median| so that a
group whose losses agree to many digits does not flag rounding noise. With an even number
of runs at a step, the median is the lower of the two middle values (no average: the
envelope's centre is always one run's loss). numpy only: the server needs no torch.

Example::

    >>> import numpy as np
    >>> steps = np.arange(1, 31)
    >>> runs = {f"r{i}": (steps, np.full(30, 1.0 + 0.01 * i)) for i in range(4)}
    >>> runs["bad"] = (steps, np.full(30, 9.0))
    >>> [r for r, hit in leaving(runs).items() if hit is not None]
    ['bad']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Envelope", "envelope", "leaving", "lower_nanmedian"]

MAD_TO_SIGMA = 1.4826
MIN_RUNS = 3

Vector = np.ndarray[Any, Any]
Losses = dict[str, tuple[Vector, Vector]]
"""Per run id: (steps, loss), two equally long one-dimensional arrays."""


@dataclass
class Envelope:
    """Per step: the median, the robust scale and how many runs had a loss there."""

    steps: Vector  # int64, (steps,)
    median: Vector  # float64, (steps,)
    scale: Vector  # float64, (steps,)
    values: Vector  # float64, (runs, steps): NaN where a run has no finite loss
    present: Vector  # bool, (runs, steps): the run logged a loss there (NaN and ±Inf too)
    runs: list[str]


def lower_nanmedian(values: Vector) -> Vector:
    """Per column of a 2-D array, the lower median of its non-NaN values (NaN if none)."""
    ordered = np.sort(values, axis=0)  # NaN sorts last
    count = np.count_nonzero(~np.isnan(values), axis=0)
    row = np.maximum((count - 1) // 2, 0)
    out = np.take_along_axis(ordered, row[np.newaxis, :], axis=0)[0]
    return np.where(count > 0, out, np.nan)


def envelope(losses: Losses, *, floor: float = 0.01) -> Envelope:
    """The envelope over the steps where at least ``MIN_RUNS`` runs have a finite loss."""
    runs = sorted(losses)
    all_steps = sorted({int(s) for steps, _ in losses.values() for s in np.asarray(steps).tolist()})
    column = {s: i for i, s in enumerate(all_steps)}
    values = np.full((len(runs), len(all_steps)), np.nan, dtype=np.float64)
    present = np.zeros(values.shape, dtype=np.bool_)
    for r, name in enumerate(runs):
        steps, loss = losses[name]
        idx = np.array([column[int(s)] for s in np.asarray(steps).tolist()], dtype=np.int64)
        values[r, idx] = np.asarray(loss, dtype=np.float64)
        present[r, idx] = True
    values = np.where(np.isfinite(values), values, np.nan)
    keep = np.count_nonzero(np.isfinite(values), axis=0) >= MIN_RUNS
    values, present = values[:, keep], present[:, keep]
    median = lower_nanmedian(values)
    with np.errstate(over="ignore"):  # losses near the float limit: an infinite spread
        mad = lower_nanmedian(np.abs(values - median))
        scale = np.maximum(np.maximum(MAD_TO_SIGMA * mad, floor * np.abs(median)), 1e-12)
    steps = np.array(all_steps, dtype=np.int64)[keep]
    return Envelope(steps, median, scale, values, present, runs)


def leaving(
    losses: Losses, *, z: float = 4.0, steps: int = 20, floor: float = 0.01
) -> dict[str, int | None]:
    """For each run, the first step of its first ``steps``-long stretch outside, or None."""
    env = envelope(losses, floor=floor)
    out: dict[str, int | None] = dict.fromkeys(env.runs)
    if env.steps.size == 0:
        return out
    # A NaN or infinite loss where the others are finite is outside by any measure.
    with np.errstate(invalid="ignore", over="ignore"):
        far = (np.abs(env.values - env.median) / env.scale) > z
    outside = env.present & (np.isnan(env.values) | far)
    for r, name in enumerate(env.runs):
        run_length = 0
        for i, hit in enumerate(outside[r].tolist()):
            run_length = run_length + 1 if hit else 0
            if run_length == steps:
                out[name] = int(env.steps[i - steps + 1])
                break
    return out
