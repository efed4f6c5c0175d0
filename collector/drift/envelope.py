"""The seed envelope of a group of runs, and the runs that leave it (``seed-envelope``).

Runs with the same config and code but different seeds should have losses that scatter
around a common curve. Per step, over the runs that logged a loss there, the envelope is
the median ± ``z`` robust standard deviations (1.4826 × the median absolute deviation). A
run *leaves* the envelope when its robust z-score exceeds ``z`` (default 4) on ``steps``
(default 20) consecutive steps. The scale has a floor of ``floor`` × |median| so that a
group whose losses agree to many digits does not flag rounding noise.

Example::

    >>> import torch
    >>> steps = torch.arange(1, 31)
    >>> runs = {f"r{i}": (steps, torch.full((30,), 1.0 + 0.01 * i)) for i in range(4)}
    >>> runs["bad"] = (steps, torch.full((30,), 9.0))
    >>> [r for r, hit in leaving(runs).items() if hit is not None]
    ['bad']
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Envelope", "envelope", "leaving"]

MAD_TO_SIGMA = 1.4826
MIN_RUNS = 3


@dataclass
class Envelope:
    """Per step: the median, the robust scale and how many runs had a loss there."""

    steps: torch.Tensor
    median: torch.Tensor
    scale: torch.Tensor
    values: torch.Tensor  # (runs, steps), NaN where a run has no finite loss
    present: torch.Tensor  # (runs, steps): the run logged a loss there (NaN and ±Inf too)
    runs: list[str]


def envelope(
    losses: dict[str, tuple[torch.Tensor, torch.Tensor]], *, floor: float = 0.01
) -> Envelope:
    """The envelope over the steps where at least ``MIN_RUNS`` runs have a finite loss."""
    runs = sorted(losses)
    all_steps = sorted({int(s) for steps, _ in losses.values() for s in steps.tolist()})
    column = {s: i for i, s in enumerate(all_steps)}
    values = torch.full((len(runs), len(all_steps)), float("nan"), dtype=torch.float64)
    present = torch.zeros(values.shape, dtype=torch.bool)
    for r, name in enumerate(runs):
        steps, loss = losses[name]
        idx = torch.tensor([column[int(s)] for s in steps.tolist()], dtype=torch.int64)
        values[r, idx] = loss.to(torch.float64)
        present[r, idx] = True
    values = torch.where(values.isfinite(), values, torch.full_like(values, float("nan")))
    keep = values.isfinite().sum(0) >= MIN_RUNS
    values, present = values[:, keep], present[:, keep]
    median = values.nanmedian(0).values
    mad = (values - median).abs().nanmedian(0).values
    scale = torch.maximum(MAD_TO_SIGMA * mad, floor * median.abs()).clamp_min(1e-12)
    steps = torch.tensor(all_steps, dtype=torch.int64)[keep]
    return Envelope(steps, median, scale, values, present, runs)


def leaving(
    losses: dict[str, tuple[torch.Tensor, torch.Tensor]],
    *,
    z: float = 4.0,
    steps: int = 20,
    floor: float = 0.01,
) -> dict[str, int | None]:
    """For each run, the first step of its first ``steps``-long stretch outside, or None."""
    env = envelope(losses, floor=floor)
    out: dict[str, int | None] = dict.fromkeys(env.runs)
    if env.steps.numel() == 0:
        return out
    # A NaN or infinite loss where the others are finite is outside by any measure.
    outside = env.present & (
        env.values.isnan() | (((env.values - env.median).abs() / env.scale) > z)
    )
    for r, name in enumerate(env.runs):
        run_length = 0
        for i, hit in enumerate(outside[r].tolist()):
            run_length = run_length + 1 if hit else 0
            if run_length == steps:
                out[name] = int(env.steps[i - steps + 1])
                break
    return out
