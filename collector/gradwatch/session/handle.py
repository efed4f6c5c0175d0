"""The run handle returned by :func:`gradwatch.watch`."""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

import torch

from gradwatch.checks.amp import ScalerWatch
from gradwatch.checks.engine import CheckEngine
from gradwatch.checks.findings import Finding, FindingSink
from gradwatch.core import checkids
from gradwatch.core.contract import EndMeta
from gradwatch.core.errors import IntegrityError
from gradwatch.core.structure.recorder import STORED
from gradwatch.core.wire import Record
from gradwatch.hooks import backward as backward_tap
from gradwatch.hooks import lossguard
from gradwatch.hooks.checkpoint_policy import CheckpointSaver
from gradwatch.hooks.classloss import ClassLossWatch
from gradwatch.hooks.clipgrad import ClipWatch
from gradwatch.hooks.connectivity import GraphWatch
from gradwatch.hooks.loaders import LoaderWatch
from gradwatch.hooks.model import ModelHooks
from gradwatch.hooks.optimizer import OptimizerWatch
from gradwatch.hooks.pipeline import SCALARS_PER_RECORD, StepPipeline
from gradwatch.nan.origin import NanOrigin
from gradwatch.session.options import WatchOptions
from gradwatch.session.run_context import RunContext
from gradwatch.transport import record_builder as records
from gradwatch.transport.writer import RunIO

if TYPE_CHECKING:
    from gradwatch.ddp.ranks import RankSync

P = ParamSpec("P")
R = TypeVar("R")

HEARTBEAT_SECONDS = 5.0
FINGERPRINT_WAIT = 2.0  # close() waits at most this long for the slow fingerprint
#: on the CPU, rows go to the writer in windows of at most this many steps or seconds: each
#: window costs the writer fixed work (the windowed checks' tensor ops, one STEPS record, one
#: spool write; benchmarks/results/writer_replay.md) on top of its rows, shared by fewer
#: rows the shorter the window; a SIGKILLed process loses at most a window and a writer
#: tick (0.2 s): under a second
CPU_GROUP_STEPS, CPU_GROUP_SECONDS = 256, 0.5
_SHARED_KEPT = 256
_live: weakref.WeakSet[Run] = weakref.WeakSet()


def _disable_after_fork() -> None:
    for run in list(_live):
        run._forked = True


os.register_at_fork(after_in_child=_disable_after_fork)


class _Attachable(Protocol):
    """A hook object of the run: registers its hooks on ``attach``, removes them on
    ``detach``."""

    def attach(self) -> None: ...
    def detach(self) -> None: ...


class Run:
    """One watched training run. Use :func:`gradwatch.watch` to make one.

    It is a context manager; :meth:`close` detaches every hook and flushes the spool::

        with gradwatch.watch(model, optimizer, project="demo") as run:
            for x, y in loader:
                ...
                run.log({"accuracy": acc})
    """

    def __init__(
        self,
        *,
        run_id: str,
        run_dir: Path,
        options: WatchOptions,
        models: Mapping[str, torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        names: dict[int, str],
        device: torch.device,
    ) -> None:
        self.id = run_id
        self.dir = run_dir
        self._device = device
        # On the CPU the values are on the host at once and the checks see every step; the
        # rows are handed to the writer in groups (at most CPU_GROUP_SECONDS old) so that
        # one record is not encoded per step. On accelerators: one transfer per 10 steps.
        cpu = device.type == "cpu"
        transfer_every = options.transfer_every or (CPU_GROUP_STEPS if cpu else 10)
        transfer_max_age = CPU_GROUP_SECONDS if cpu and not options.transfer_every else None
        self._names = names
        self.status = "running"
        self._closed = False
        self._forked = False
        self._lock = threading.Lock()
        self._reported: set[str] = set()
        self._last_heartbeat = time.monotonic()
        self._ranks: RankSync | None = None  # set by watch() in a multi-rank job
        self._io = RunIO(run_dir, server=options.server, token=options.token)
        self._sink = FindingSink(options.policy, self._io.submit)
        self._checks = CheckEngine(
            self._sink,
            accumulation_steps=options.accumulation_steps,
            models=models,
            allow_mutation=options.allow_mutation,
        )
        #: what the hooks see of this run (passes, internal errors and options live there)
        self._ctx = ctx = RunContext(
            run_id=run_id,
            run_dir=run_dir,
            options=options,
            names=names,
            transfer_every=transfer_every,
            transfer_max_age=transfer_max_age,
            io=self._io,
            sink=self._sink,
            checks=self._checks,
            guard=self._guard,
            report_once=self._report_once,
            applied_elsewhere=self._applied_elsewhere,
            after_step=self._after_step,
        )
        #: passes that reached several optimizers -> those optimizers (the latest few)
        self._shared: dict[int, list[OptimizerWatch]] = {}
        self._watches = ctx.watches
        #: helper threads (the slow fingerprint) that close() waits for, within its timeout
        self._background = ctx.background
        self._watches.extend(
            OptimizerWatch(ctx, i, opt, device) for i, opt in enumerate(optimizers)
        )
        #: the per-step work on the I/O thread (structure, row checks, records)
        self._pipeline = ctx.pipeline = StepPipeline(ctx)
        self._graph = GraphWatch(ctx)
        self._model_hooks = ctx.model_hooks = ModelHooks(ctx, models, self._watches)
        self._checks.coverage.runs = self._model_hooks.runs
        for key, owners in self._model_hooks.owners.items():
            for watch in owners:
                watch.model_keys.append(key)
        # provenance of non-finite values; checkpoint policy
        self._nan_origin = ctx.nan_origin = NanOrigin(ctx)
        self._checks.numerics.origin = self._nan_origin.origin
        self._saver = ctx.saver = CheckpointSaver(ctx)
        self._sink.checkpoint = self._saver.save
        self._shape_listener = self._guard(self._loss_shape, "loss shape check")
        self._backward_listener = self._guard(self._after_backward, "backward listener")
        #: repeated-batch, clip-before-backward and loss-at-chance: what they watch (clips
        #: always: a clip is an in-place edit that the lifecycle must not take for a clearing)
        self._data_hooks: list[_Attachable] = [ClipWatch(ctx)]
        if self._sink.enabled(checkids.REPEATED_BATCH):
            self._data_hooks.append(LoaderWatch(lambda: self.step, self._checks.repeats))
        if self._sink.enabled(checkids.LOSS_AT_CHANCE):
            self._data_hooks.append(
                ClassLossWatch(self._checks.chance.kind, self._guard, list(models.values()))
            )
        self._scaler_watch = (
            None
            if options.scaler is None
            else ScalerWatch(
                options.scaler,
                optimizers,
                self._sink,
                lambda: self.step,
                self._guard,
                self._scaler_updated,
            )
        )

    # -- public API ---------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """Completed steps of the first optimizer (the run's step counter)."""
        return self._watches[0].step

    @property
    def findings(self) -> list[Finding]:
        """The findings of this run so far (the first 10,000)."""
        return list(self._sink.findings)

    @property
    def unchecked_steps(self) -> int:
        """Steps written unchecked while the checks were behind training."""
        return self._pipeline.unchecked_steps

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    @property
    def context(self) -> RunContext:
        """What this run's hooks see of it (:class:`gradwatch.session.run_context.RunContext`:
        options, names, I/O, findings sink, checks, optimizer watches): for gradwatch's own
        modules, tools and tests; not a stable API."""
        return self._ctx

    @property
    def _options(self) -> WatchOptions:
        return self._ctx.options

    @_options.setter
    def _options(self, options: WatchOptions) -> None:
        self._ctx.options = options

    def log(self, values: Mapping[str, float | int | bool | torch.Tensor]) -> None:
        """Add user scalars to the current step (``run.step``). Never raises: a value that is
        not a number or a one-element tensor is reported once and dropped."""
        if self._closed or self._forked:
            return
        pipeline = self._pipeline
        for key, value in dict(values).items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                pipeline.scalars.append((self.step, str(key), value.detach().reshape(())))
            elif isinstance(value, int | float):
                pipeline.scalars.append((self.step, str(key), float(value)))
            else:
                self._report_once(
                    f"log:{key}",
                    f"run.log({key!r}=...) needs a number or a "
                    f"one-element tensor, got {type(value).__name__}; dropped",
                )
        if len(pipeline.scalars) >= SCALARS_PER_RECORD:
            pipeline.emit_scalars()

    def flush(self, timeout: float = 10.0) -> bool:
        """Move everything collected so far to the spool (and the server when one is set)."""
        if self._forked:
            return False
        self._pipeline.drain()
        self._pipeline.emit_scalars()
        self._sink.flush()
        return self._io.flush(timeout)

    def close(
        self, status: str = "finished", *, error: str | None = None, timeout: float = 10.0
    ) -> None:
        """Detach every hook, write the end record and flush. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._at_exit)
        _live.discard(self)
        if self._forked:
            return
        self._pipeline.finish()
        if self._ranks is not None:
            self._ranks.close(timeout / 2)
        lossguard.uninstall(self._shape_listener)
        for hook in self._hooks():
            hook.detach()
        backward_tap.uninstall(self._backward_listener)
        deadline = time.monotonic() + min(timeout / 2, FINGERPRINT_WAIT)
        for thread in self._background:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.flush(timeout)
        self.status = status
        end: EndMeta = {
            "status": status,
            "error": error,
            "ended_at": time.time(),
            "steps": [w.step for w in self._watches],
            "internal_errors": self._ctx.internal_errors,
            "io": self._io.stats.__dict__.copy(),
        }
        if self._pipeline.structure_stored:
            end["structure"] = STORED
        self._io.submit(records.end_record(end))
        self._io.close(timeout)
        stats = self._io.stats
        lost = stats.dropped_queue + stats.dropped_disk
        if lost:
            self._report_once(
                "lost",
                f"{lost} records could not be written to {self.dir} "
                f"({stats.last_error}); the run's data there is incomplete",
            )

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:
            self.close("failed", error=f"{type(exc).__name__}: {exc}")

    def __repr__(self) -> str:
        from gradwatch.analysis.display import live_text  # loaded on first display only

        return live_text(self)

    def _repr_html_(self) -> str:
        """The notebook display (gradwatch.analysis.display; needs the analysis extra)."""
        from gradwatch.analysis.display import live_html

        return live_html(self)

    # -- used by the hooks --------------------------------------------------------------------
    def _hooks(self) -> list[_Attachable]:
        """The hook objects that attach at start and detach at close, in that order."""
        scaler = [] if self._scaler_watch is None else [self._scaler_watch]
        return [*scaler, *self._watches, self._model_hooks, self._nan_origin, *self._data_hooks]

    def _start(self, first_records: list[Record], fingerprint: dict[str, Any]) -> None:
        """Register the hooks and queue the first records (called once by ``watch``)."""
        for record in first_records:
            self._io.submit(record)
        self._checks.at_start(fingerprint, self._watches)
        backward_tap.install(self._backward_listener)
        lossguard.install(self._shape_listener)
        for hook in self._hooks():
            hook.attach()
        if self._ranks is not None:
            self._ranks.attach()
        _live.add(self)
        _uncaught.install()
        atexit.register(self._at_exit)

    def _guard(self, fn: Callable[P, R], where: str) -> Callable[P, R | None]:
        """Wrap a hook so that nothing but a requested ``IntegrityError`` escapes it."""

        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R | None:
            if self._closed or self._forked:
                return None
            try:
                return fn(*args, **kwargs)
            except IntegrityError:
                raise
            except Exception as exc:
                self._ctx.internal_errors += 1
                self._report_once(
                    where,
                    f"internal error in {where} ({type(exc).__name__}: "
                    f"{exc}); training continues, collection may be incomplete",
                )
                return None

        return guarded

    def _after_backward(
        self, root: torch.Tensor | None, took: float, tensor: torch.Tensor | None
    ) -> None:
        ctx = self._ctx
        ctx.passes += 1
        reached = [watch.after_backward(root, took) for watch in self._watches]
        for watch, count in zip(self._watches, reached, strict=True):
            if count and watch.manual is not None:
                watch.manual.after_backward()
        if len(reached) > 1 and sum(1 for r in reached if r) > 1:
            shared = self._shared
            shared[ctx.passes] = [w for w, r in zip(self._watches, reached, strict=True) if r]
            while len(shared) > _SHARED_KEPT:
                del shared[next(iter(shared))]
        cut = self._graph.after_backward(tensor, reached)
        if cut:
            for watch in self._watches:
                watch.pending.add(("backward-cut", watch._now(), cut))

    def _applied_elsewhere(self, n: int, watch: OptimizerWatch) -> bool:
        """Whether backward pass ``n`` also reached another optimizer that has stepped
        since (a GAN's generator loss reaching the discriminator): its gradients were used
        there, so clearing them in ``watch`` discards nothing."""
        return any(v is not watch and v.stepped_at >= n for v in self._shared.get(n, ()))

    def _scaler_updated(self) -> None:
        """``GradScaler.update()``: this iteration's gradients were applied or skipped on
        purpose (inf/NaN), so clearing them next discards nothing."""
        for watch in self._watches:
            watch.note_applied()

    def _loss_shape(self, fn: str, a: torch.Size, b: torch.Size, out: torch.Size) -> None:
        self._checks.loss_shape(self.step + 1, fn, a, b, out)

    def _report_once(self, key: str, message: str) -> None:
        """One line on stderr per ``key`` for the life of the run."""
        if key not in self._reported:
            self._reported.add(key)
            sys.stderr.write(f"gradwatch: {message}\n")

    def _after_step(self, watch: OptimizerWatch) -> None:
        """Called at the end of every optimizer step."""
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_SECONDS:
            self._last_heartbeat = now
            self._io.submit(
                records.heartbeat_record(
                    {"t": time.time(), "steps": [w.step for w in self._watches]}
                )
            )

    def _at_exit(self) -> None:
        self.close("failed" if _uncaught.seen else "finished", error=_uncaught.seen)


class _Uncaught:
    """Remembers an uncaught exception so that an unclosed run ends as ``failed``."""

    seen: str | None = None
    installed = False

    def install(self) -> None:
        if self.installed:
            return
        self.installed = True
        previous = sys.excepthook

        def hook(
            exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
        ) -> None:
            self.seen = f"{exc_type.__name__}: {exc}"
            previous(exc_type, exc, tb)

        sys.excepthook = hook


_uncaught = _Uncaught()
