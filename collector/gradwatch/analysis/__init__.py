"""Runs as data: a pandas analysis API over the local spool or a gradwatch server.

``gradwatch.open_run(run)`` returns a :class:`RunData` whose ``.steps``, ``.tensors``,
``.findings`` and ``.lifecycle`` are DataFrames; ``gradwatch.runs()`` lists runs. pandas
(the ``analysis`` extra) is imported on first use, never by ``import gradwatch``.
See docs/analysis.md.
"""

from __future__ import annotations

from gradwatch.analysis.api import open_run, runs
from gradwatch.analysis.frames import pivot
from gradwatch.analysis.rundata import RunData

__all__ = ["RunData", "open_run", "pivot", "runs"]
