"""A recorded run as pandas DataFrames, read from the local spool or from a server.

Example::

    import gradwatch
    run = gradwatch.open_run("20260101-120000-ab12")      # or server="http://host:8000"
    run.steps.loss.plot()
    run.pivot("grad_norm").plot(logy=True)
    run.findings[["check", "step", "message"]]
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gradwatch.analysis import frames
from gradwatch.analysis.selection import STEPS_METRICS, Selection, Source

if TYPE_CHECKING:
    from pandas import DataFrame

STATS = ("grad_norm", "param_norm", "update_norm", "nonfinite_grad")


def step_range(steps: slice | None) -> tuple[int | None, int | None]:
    """``slice(first, last)`` as an inclusive step range (as ``DataFrame.loc`` slices)."""
    if steps is None:
        return None, None
    if not isinstance(steps, slice) or steps.step is not None:
        raise TypeError(f"steps= takes slice(first, last) (both inclusive), got {steps!r}")
    for end in (steps.start, steps.stop):
        if end is not None and (not isinstance(end, int) or isinstance(end, bool)):
            raise TypeError(f"steps= bounds must be integer step numbers, got {end!r}")
    return steps.start, steps.stop


def _points(points: int | None) -> int | None:
    if points is not None and (not isinstance(points, int) or points < 2):
        raise ValueError(f"points= must be an integer of at least 2 (or None), got {points!r}")
    return points


class RunData:
    """One run's recorded data. Tables are read on first use and kept; the ``read_*``
    methods read a step range (``steps=slice(first, last)``, inclusive) and downsample to
    about ``points`` points per series, keeping each bucket's min, max and every non-finite
    value (the server does it when the run is read from a server)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.id = source.run_id

    @functools.cached_property
    def info(self) -> dict[str, Any]:
        """``id, project, name, status, steps, start, fingerprint, end`` (and, from a
        server, the other ``gradwatch runs --json`` fields)."""
        return self.source.info()

    @property
    def status(self) -> str:
        """``finished``, ``failed``, ``running``… (``unfinished`` for a local run without an
        END record: still running, or killed)."""
        return str(self.info["status"])

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The reproducibility fingerprint (fast and slow phases merged)."""
        return dict(self.info["fingerprint"])

    def tensor_names(self, optimizer: int = 0) -> list[str]:
        """The tensors of one optimizer, in the order of its statistics."""
        tensors = self.info["start"].get("tensors", [])
        return [str(t["name"]) for t in tensors if int(t.get("optimizer", 0)) == optimizer]

    @functools.cached_property
    def steps(self) -> DataFrame:
        """Every step of the first optimizer (see :meth:`read_steps`)."""
        return self.read_steps()

    def read_steps(
        self, steps: slice | None = None, points: int | None = None, optimizer: int = 0
    ) -> DataFrame:
        """Indexed by step: ``loss``, ``has_loss``, ``lr_<group>``, ``n_backward``,
        ``step_time``, ``forward_time``, ``backward_time``, ``optimizer_time``,
        ``batch_sum``, ``batch_weighted_sum`` (the batch checksum pair) and the user scalars
        of ``run.log``."""
        first, last = step_range(steps)
        sel = Selection(
            metrics=list(STEPS_METRICS),
            scalars=self.source.scalar_names(),
            optimizer=optimizer,
            start=first,
            end=last,
            points=_points(points),
        )
        return frames.steps_frame(self.source.series(sel))

    @functools.cached_property
    def tensors(self) -> DataFrame:
        """Every step × tensor of the first optimizer (see :meth:`read_tensors`)."""
        return self.read_tensors()

    def read_tensors(
        self, steps: slice | None = None, points: int | None = None, optimizer: int = 0
    ) -> DataFrame:
        """Long format: ``step, tensor, grad_norm, param_norm, update_norm, nonfinite,
        has_grad``, by step then model order."""
        first, last = step_range(steps)
        names = self.tensor_names(optimizer)
        sel = Selection(
            tensors=names,
            stats=list(STATS),
            metrics=["has_grad"],
            optimizer=optimizer,
            start=first,
            end=last,
            points=_points(points),
        )
        return frames.tensors_frame(self.source.series(sel), names)

    def pivot(
        self, stat: str = "grad_norm", steps: slice | None = None, points: int | None = None
    ) -> DataFrame:
        """One statistic as steps × tensors (all steps: the cached :attr:`tensors`)."""
        table = (
            self.tensors if steps is None and points is None else self.read_tensors(steps, points)
        )
        return frames.pivot(table, stat)

    @functools.cached_property
    def findings(self) -> DataFrame:
        """The ``gradwatch findings --json`` columns, by step."""
        return frames.findings_frame(self.source.findings())

    @functools.cached_property
    def lifecycle(self) -> DataFrame:
        """The optimizer lifecycle of every step (see :meth:`read_lifecycle`)."""
        return self.read_lifecycle()

    def read_lifecycle(self, steps: slice | None = None, optimizer: int = 0) -> DataFrame:
        """One row per event: ``step, n_backward, order, event`` (backward, zero_grad,
        grad_modified, skipped, dropped, step), ``seconds`` since the previous step ended,
        ``detail``."""
        first, last = step_range(steps)
        end = int(self.info["steps"]) if last is None else last
        return frames.lifecycle_frame(self.source.lifecycle(optimizer, first or 0, end))

    def __repr__(self) -> str:
        from gradwatch.analysis.display import text

        return text(self)

    def _repr_html_(self) -> str:
        from gradwatch.analysis.display import html

        return html(self)
