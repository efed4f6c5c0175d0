"""What the per-step hooks see of their run: a small protocol, so that the hook objects
(optimizer lifecycle, model hooks, connectivity, NaN origin, checkpoint policy, rank sync)
depend on this leaf module and never on :class:`gradwatch.session.handle.Run`, which owns
them. ``W`` is the optimizer watch type (:class:`gradwatch.hooks.optimizer.OptimizerWatch`),
kept generic so that this module imports no hook module.

The run builds one :class:`gradwatch.session.run_context.RunContext` that implements it and
hands it to each hook object: its members are public, and no module outside
``gradwatch.session`` reads a private member of the run. Only the layers below the hooks
are imported here (options, checks, stats, transport)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    import torch

    from gradwatch.checks.engine import CheckEngine
    from gradwatch.checks.findings import FindingSink
    from gradwatch.session.options import WatchOptions
    from gradwatch.stats.transfer import Reader
    from gradwatch.transport.record_builder import StepMeta
    from gradwatch.transport.writer import RunIO

P = ParamSpec("P")
R = TypeVar("R")
W = TypeVar("W")
W_contra = TypeVar("W_contra", contravariant=True)


class NanScreen(Protocol[W_contra]):
    """The NaN-provenance side the hooks call (:class:`gradwatch.nan.origin.NanOrigin`)."""

    on: bool

    def screen(self, w: W_contra) -> None: ...
    def stepped(self) -> None: ...
    def before_forward(
        self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any], module: str | None = None
    ) -> None: ...
    def spread(self, key: str, points: int) -> None: ...
    def after_forward(self, key: str, output: Any) -> None: ...
    def rng_before_forward(self) -> dict[str, Any] | None:
        """The CPU generator state at the current step's first training forward."""
        ...


class PolicySaver(Protocol):
    """The checkpoint policy (:class:`gradwatch.hooks.checkpoint_policy.CheckpointSaver`)."""

    def keep(self, optimizer: int, step: int) -> None: ...


class WatchedModels(Protocol):
    """The watched models (:class:`gradwatch.hooks.model.ModelHooks`)."""

    @property
    def models(self) -> Mapping[str, torch.nn.Module]: ...
    def reached(self, optimizer: int) -> None:
        """A backward pass reached ``optimizer``'s tensors."""
        ...

    def hookless(self, key: str) -> bool:
        """Whether model ``key`` trains while none of its modules runs a module hook."""
        ...


class StepRows(Protocol[W_contra]):
    """Where an optimizer watch hands its windows of rows
    (:class:`gradwatch.hooks.pipeline.StepPipeline`: structure, row checks and records, on
    the I/O thread)."""

    def emit(self, watch: W_contra, reader: Reader[StepMeta]) -> None:
        """Queue a window of rows (the transfer is waited for on the I/O thread)."""
        ...


class Guard(Protocol):
    """Wraps a hook so that nothing but a requested ``IntegrityError`` escapes it."""

    def __call__(self, fn: Callable[P, R], where: str) -> Callable[P, R | None]: ...


class HookContext(Protocol[W]):
    """The run as its hooks see it (:class:`gradwatch.session.run_context.RunContext`). The
    hooks read these members and never rebind them, except ``internal_errors`` (a hook
    that fails adds one). ``options`` is rebound by the session when it adopts a
    ``GradScaler`` later, so hooks read it per use instead of keeping a copy."""

    id: str
    dir: Path
    options: WatchOptions
    names: dict[int, str]  # id(parameter) -> its name
    transfer_every: int
    transfer_max_age: float | None
    passes: int  # backward passes seen
    internal_errors: int  # the run's count; a hook that fails adds one
    checks: CheckEngine
    sink: FindingSink
    io: RunIO
    watches: list[W]

    @property
    def nan_origin(self) -> NanScreen[W]: ...
    @property
    def saver(self) -> PolicySaver: ...
    @property
    def pipeline(self) -> StepRows[W]: ...
    @property
    def model_hooks(self) -> WatchedModels: ...

    @property
    def step(self) -> int: ...

    @property
    def guard(self) -> Guard: ...
    @property
    def report_once(self) -> Callable[[str, str], None]:
        """One line on stderr per key for the life of the run."""
        ...

    @property
    def applied_elsewhere(self) -> Callable[[int, W], bool]: ...
    @property
    def after_step(self) -> Callable[[W], None]: ...
