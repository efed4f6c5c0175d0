"""The run's context: everything the hook objects, NaN provenance, the cross-rank checks and
the live display see of a :class:`gradwatch.session.handle.Run`, as public members of one
small object (it implements :class:`gradwatch.hooks.context.HookContext`).

The run builds it first (options, names, I/O, sink, checks, its callbacks), hands it to each
hook object it makes, and fills in the hook objects the others call (watches, the step
pipeline, model hooks, NaN origin, checkpoint saver) as they are made, before any hook is
attached. Nothing outside ``gradwatch.session`` reads a private member of the run.

Members are plain attributes and the callbacks are the run's bound methods stored as they
are: a hook reads ``ctx.after_step`` at the same cost as it read ``run._after_step``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradwatch.checks.engine import CheckEngine
    from gradwatch.checks.findings import FindingSink
    from gradwatch.hooks.checkpoint_policy import CheckpointSaver
    from gradwatch.hooks.context import Guard
    from gradwatch.hooks.model import ModelHooks
    from gradwatch.hooks.optimizer import OptimizerWatch
    from gradwatch.hooks.pipeline import StepPipeline
    from gradwatch.nan.origin import NanOrigin
    from gradwatch.session.options import WatchOptions
    from gradwatch.transport.writer import RunIO


class RunContext:
    """What a run's hooks see of it. Set once by the run, except ``options`` (rebound when a
    ``GradScaler`` is adopted after ``watch()``), ``passes`` (counted by the run) and
    ``internal_errors`` (a hook that fails adds one)."""

    __slots__ = (
        "after_step",
        "applied_elsewhere",
        "background",
        "checks",
        "dir",
        "guard",
        "id",
        "internal_errors",
        "io",
        "model_hooks",
        "names",
        "nan_origin",
        "options",
        "passes",
        "pipeline",
        "report_once",
        "saver",
        "sink",
        "transfer_every",
        "transfer_max_age",
        "watches",
    )

    id: str
    dir: Path
    #: the run's options; rebound (never edited) when a GradScaler is adopted later
    options: WatchOptions
    names: dict[int, str]  # id(parameter) -> its name
    #: rows per transfer to the host, and the oldest a window of rows may get (CPU)
    transfer_every: int
    transfer_max_age: float | None
    passes: int  # backward passes seen (counted by the run)
    internal_errors: int  # hooks that failed; written to the end record
    io: RunIO
    sink: FindingSink
    checks: CheckEngine
    watches: list[OptimizerWatch]  # one per optimizer, filled in by the run
    model_hooks: ModelHooks
    nan_origin: NanOrigin
    saver: CheckpointSaver
    #: the per-step work on the I/O thread: windows of rows -> structure, checks, records
    pipeline: StepPipeline
    #: wraps a hook so that nothing but a requested IntegrityError escapes it
    guard: Guard
    report_once: Callable[[str, str], None]  # one line on stderr per key for the run's life
    #: whether backward pass ``n`` also reached another optimizer that has stepped since
    applied_elsewhere: Callable[[int, OptimizerWatch], bool]
    after_step: Callable[[OptimizerWatch], None]  # the end of every optimizer step
    #: helper threads (the slow fingerprint) that close() waits for, within its timeout
    background: list[threading.Thread]

    def __init__(
        self,
        *,
        run_id: str,
        run_dir: Path,
        options: WatchOptions,
        names: dict[int, str],
        transfer_every: int,
        transfer_max_age: float | None,
        io: RunIO,
        sink: FindingSink,
        checks: CheckEngine,
        guard: Guard,
        report_once: Callable[[str, str], None],
        applied_elsewhere: Callable[[int, OptimizerWatch], bool],
        after_step: Callable[[OptimizerWatch], None],
    ) -> None:
        self.id = run_id
        self.dir = run_dir
        self.options = options
        self.names = names
        self.transfer_every = transfer_every
        self.transfer_max_age = transfer_max_age
        self.passes = 0
        self.internal_errors = 0
        self.io = io
        self.sink = sink
        self.checks = checks
        self.watches = []
        self.background = []
        self.guard = guard
        self.report_once = report_once
        self.applied_elsewhere = applied_elsewhere
        self.after_step = after_step

    @property
    def step(self) -> int:
        """Completed steps of the first optimizer (the run's step counter)."""
        return self.watches[0].step
