"""What a read asks a source for, and the series a source answers with.

Both sources (the local spool and a server) answer a :class:`Selection` with the same
:class:`Series`, named as the server's ``/series`` endpoint names them, so the DataFrames
built from them are equal whichever source they came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gradwatch.core.downsample import Vector, downsample
from gradwatch.core.nonfinite import decode_floats

INCIDENT_KEYS = ("incident", "role")  # finding fields that group findings into incidents
STEPS_METRICS = ("loss", "has_loss", "lr", "n_backward", "wall_time", "phases", "batch")


@dataclass(frozen=True)
class Selection:
    """Tensor names × stats, per-step metrics, user scalars, an inclusive step range, and
    how many points to keep per series (None: every point)."""

    tensors: list[str] = field(default_factory=list)
    stats: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    scalars: list[str] = field(default_factory=list)
    optimizer: int = 0
    start: int | None = None
    end: int | None = None
    points: int | None = None


@dataclass
class Series:
    """One series: ``values[i]`` at ``steps[i]`` (float64, NaN/±Inf as recorded)."""

    name: str
    kind: str  # tensor, metric or scalar
    steps: Vector
    values: Vector
    stat: str | None = None


def thinned(series: Series, points: int | None) -> Series:
    """``series`` downsampled to about ``points`` points (unchanged when None)."""
    if points is None:
        return series
    steps, values = downsample(series.steps, series.values, points)
    return Series(series.name, series.kind, steps, values, series.stat)


def vector(values: list[Any], dtype: str = "f8") -> Vector:
    """A numpy vector of decoded JSON values."""
    if dtype == "i8":
        return np.asarray(values, dtype=np.int64)
    return np.asarray([decode_floats(v) for v in values], dtype=np.float64)


class Source(Protocol):
    """Where a run is read from: :class:`~gradwatch.analysis.local.LocalSource` or
    :class:`~gradwatch.analysis.remote.ServerSource`."""

    run_id: str
    where: str

    def info(self) -> dict[str, Any]:
        """``id, project, name, status, steps, start, fingerprint, end`` of the run."""
        ...

    def series(self, sel: Selection) -> list[Series]:
        """The selected series, in the server's order and naming."""
        ...

    def scalar_names(self) -> list[str]:
        """Keys the run logged with ``run.log``, in first-logged order."""
        ...

    def findings(self) -> list[dict[str, Any]]:
        """The run's findings in their ``findings --json`` form."""
        ...

    def lifecycle(self, optimizer: int, start: int, end: int) -> list[dict[str, Any]]:
        """``{step, n_backward, events}`` for each recorded step in ``[start, end]``."""
        ...
