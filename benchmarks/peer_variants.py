"""The variants benchmarks/peers.py times: plain training, the lower bound, gradwatch and the
per-step gradient logging of wandb, TensorBoard, MLflow and aim.

Every variant wraps the same training step (``collector_overhead.plain_step``) on its own
copy of the model; ``step`` runs one training step plus the variant's logging,
``end_block`` flushes what the variant buffers (timed with the block's CPU time and
reported apart), ``close`` ends the variant's run (a one-time cost, not step time).
Peer packages are imported only when their variant is built, so this module imports
without them (they come from benchmarks/requirements-peers.txt).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import collector_overhead as core

import gradwatch

#: what each variant records per step (the README's table takes these lines)
RECORDS: dict[str, str] = {
    "plain": "nothing",
    "lower_bound": "per tensor: gradient, parameter and exact update norms and non-finite"
    " gradient count, into a preallocated in-memory buffer (no I/O, no checks)",
    "gradwatch": "per tensor: gradient, parameter and exact update norms, non-finite gradient"
    " count; the loss, a batch checksum, forward/backward/step timings; the default"
    " integrity checks; written to an on-disk spool by a background thread",
    "gradwatch_stock_ops": "as gradwatch, with the fused CPU norm kernel off for the run"
    " (stock `torch._foreach_*` ops, what `GRADWATCH_CPU_KERNEL=0` gives): the before of"
    " the kernel's before/after",
    "gradwatch_grad_norms": '`stats="grad-norms"`: per tensor the gradient norm and'
    " non-finite gradient count only (no parameter snapshot, parameter or update norms, and"
    " the five checks that need them off); otherwise as gradwatch",
    "wandb_gradients": "a 64-bin histogram of every tensor's gradient (computed in backward"
    " hooks) and the loss, committed by `run.log`; wandb-core (a separate process) writes"
    " the offline .wandb file",
    "wandb_all": "as wandb_gradients, plus a 64-bin histogram of every parameter tensor",
    "tensorboard_scalars": "per tensor: the gradient norm, one `add_scalar` event each"
    " (event file written by the SummaryWriter's background thread)",
    "tensorboard_histograms": "per tensor: a histogram of the gradient (`add_histogram`:"
    " TensorBoard's default buckets plus min, max, sum, sum of squares)",
    "mlflow_sync": "per tensor: the gradient norm, one `log_metrics` call per step into a"
    " local SQLite store, waiting for the write",
    "mlflow_async": "as mlflow_sync with `synchronous=False`: queued to MLflow's logging"
    " thread, flushed at the end of each block",
    "aim": "per tensor: the gradient norm, one `Run.track` call each (context"
    " `{'param': name}`), into an aim repository",
}
VARIANTS: tuple[str, ...] = tuple(RECORDS)
#: the package each peer variant needs (its import name)
NEEDS: dict[str, str] = {
    "wandb_gradients": "wandb",
    "wandb_all": "wandb",
    "tensorboard_scalars": "tensorboard",
    "tensorboard_histograms": "tensorboard",
    "mlflow_sync": "mlflow",
    "mlflow_async": "mlflow",
    "aim": "aim",
}
GRAD_NORMS_OPTION = {"stats": "grad-norms"}


class UnavailableError(Exception):
    """A variant that cannot run here (package missing, option not in this gradwatch)."""


class Variant:
    """Plain training: the base every other variant extends."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        self.model = model
        self.optimizer = optimizer
        self.workdir = workdir
        # torch's own backward and loss unless the variant is gradwatch: a gradwatch run
        # open through every block wraps both process-wide
        self.train = core.plain_step(model, optimizer, unwatched=not self.watched)
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.t = 0  # steps done by this variant (the logged step index)

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.train(i, x, y)
        self.t += 1

    per_block_setup = False  # True: begin_block attaches the tracker (a one-time cost)
    watched = False  # True: the variant's steps go through gradwatch's process-wide wrappers

    def begin_block(self) -> None:
        """Before each block, outside the timings (nothing here)."""

    def end_block(self) -> None:
        """Flush what the variant buffers (nothing here)."""

    def close(self) -> None:
        """End the variant's run (nothing here)."""

    def grad_norms(self) -> list[tuple[str, float]]:
        """Every tensor's gradient norm, the cheapest way we know: one fused
        ``_foreach_norm`` and a single ``tolist`` (not one ``.item()`` per tensor)."""
        named = [(n, p.grad) for n, p in self.named if p.grad is not None]
        norms = torch.stack(torch._foreach_norm([g for _, g in named])).tolist()
        return [(n, float(v)) for (n, _), v in zip(named, norms, strict=True)]


class LowerBound(Variant):
    """collector_overhead's lower bound: the same quantities, in memory, no I/O."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        super().__init__(model, optimizer, workdir)
        self.bound = core.LowerBound(model, optimizer, 64)

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.bound.step(self.t, x, y)
        self.t += 1


class Gradwatch(Variant):
    """One gradwatch run through every block, as every other tracker keeps one run per
    model: ``watch()`` before the first block, ``run.flush()`` at each block's end (it
    waits until the writer thread has handled the block's rows: the flush column, inside
    the block's CPU time), ``close()`` after the last. gradwatch wraps
    ``torch.autograd.backward`` and the functional losses process-wide while a run is open:
    the other variants' steps call torch's own (``plain_step(unwatched=True)``), but two
    gradwatch variants in one benchmark see each other's backward passes, so compare them
    one at a time for exact figures."""

    options: ClassVar[dict[str, Any]] = {}
    watched = True

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        super().__init__(model, optimizer, workdir)
        try:
            run = gradwatch.watch(self.model, self.optimizer, data_dir=self.workdir, **self.options)
        except (gradwatch.ConfigError, TypeError) as e:
            raise UnavailableError(f"this gradwatch has no option {self.options}: {e}") from e
        for thread in run.context.background:  # the fingerprint helper thread: a one-time cost
            thread.join()
        self.run: gradwatch.Run | None = run

    def end_block(self) -> None:
        if self.run is not None:
            self.run.flush()

    def close(self) -> None:
        if self.run is None:
            return
        run, self.run = self.run, None
        run.close()
        if run.context.internal_errors:
            raise RuntimeError(f"gradwatch reported {run.context.internal_errors} internal errors")


class GradwatchStockOps(Gradwatch):
    """gradwatch with the fused CPU kernel switched off for this run only (the environment
    variable is read once per process, and the variants share one process)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        super().__init__(model, optimizer, workdir)
        assert self.run is not None
        for watch in self.run.context.watches:
            watch.stats._kernel = None


class GradwatchGradNorms(Gradwatch):
    options: ClassVar[dict[str, Any]] = GRAD_NORMS_OPTION


_WANDB: dict[str, Any] = {}  # the process's one wandb run and how many variants use it


class Wandb(Variant):
    """``wandb.init(mode="offline")`` + ``watch(model, log=..., log_freq=1)``, and ``log`` of
    the loss every step. wandb.watch's hooks compute the histograms in backward and stage
    them on the global ``wandb.run``; ``log`` commits the step. Because the hooks write to
    the global run, both wandb variants share one run (each model under its own
    ``graph_<n>`` prefix); it is finished when the last of them closes."""

    log = "gradients"

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        super().__init__(model, optimizer, workdir)
        import wandb

        if not _WANDB:
            os.environ.setdefault("WANDB_SILENT", "true")
            settings = wandb.Settings(console="off", x_disable_stats=True)
            _WANDB["run"] = wandb.init(
                mode="offline", dir=str(workdir), project="gradwatch-peers", settings=settings
            )
            _WANDB["users"] = 0
        _WANDB["users"] += 1
        self.run = _WANDB["run"]
        self.run.watch(model, log=self.log, log_freq=1)

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        loss = self.train(i, x, y)
        assert loss is not None
        self.run.log({"loss": loss.item()})
        self.t += 1

    def close(self) -> None:
        self.run.unwatch(self.model)
        _WANDB["users"] -= 1
        if not _WANDB["users"]:
            self.run.finish()
            _WANDB.clear()


class WandbAll(Wandb):
    log = "all"


class TensorBoardScalars(Variant):
    """``SummaryWriter.add_scalar`` of every tensor's gradient norm per step."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        super().__init__(model, optimizer, workdir)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(workdir))

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.train(i, x, y)
        for name, value in self.grad_norms():
            self.writer.add_scalar(f"grad_norm/{name}", value, self.t)
        self.t += 1

    def end_block(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TensorBoardHistograms(TensorBoardScalars):
    """``SummaryWriter.add_histogram`` of every tensor's gradient per step."""

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.train(i, x, y)
        for name, p in self.named:
            if p.grad is not None:
                self.writer.add_histogram(f"grad/{name}", p.grad, self.t)
        self.t += 1


class MlflowSync(Variant):
    """``mlflow.log_metrics`` of every tensor's gradient norm per step, into one local SQLite
    store per benchmark (MLflow's default backend since 3.7; its file store is legacy)."""

    synchronous = True

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        super().__init__(model, optimizer, workdir)
        import mlflow

        self.mlflow = mlflow
        root = workdir.parent / "mlflow"
        root.mkdir(exist_ok=True)
        mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
        client = mlflow.MlflowClient()
        name = "gradwatch-peers"
        exp = client.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp else client.create_experiment(name, str(root / "art"))
        self.run_id = client.create_run(exp_id, run_name=workdir.name).info.run_id
        self.client = client

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.train(i, x, y)
        metrics = {f"grad_norm/{name}": value for name, value in self.grad_norms()}
        self.mlflow.log_metrics(
            metrics, step=self.t, synchronous=self.synchronous, run_id=self.run_id
        )
        self.t += 1

    def end_block(self) -> None:
        if not self.synchronous:
            self.mlflow.flush_async_logging()

    def close(self) -> None:
        self.end_block()
        self.client.set_terminated(self.run_id)


class MlflowAsync(MlflowSync):
    synchronous = False


class Aim(Variant):
    """``aim.Run(repo=...).track(value, name="grad_norm", step=t, context={"param": name})``
    per tensor per step (system-resource tracking and terminal capture off)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> None:
        super().__init__(model, optimizer, workdir)
        import aim

        self.run = aim.Run(
            repo=str(workdir),
            experiment="gradwatch-peers",
            system_tracking_interval=None,
            capture_terminal_logs=False,
            log_system_params=False,
        )

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.train(i, x, y)
        for name, value in self.grad_norms():
            self.run.track(value, name="grad_norm", step=self.t, context={"param": name})
        self.t += 1

    def close(self) -> None:
        self.run.close()


FACTORIES: dict[str, Callable[[nn.Module, torch.optim.Optimizer, Path], Variant]] = {
    "plain": Variant,
    "lower_bound": LowerBound,
    "gradwatch": Gradwatch,
    "gradwatch_stock_ops": GradwatchStockOps,
    "gradwatch_grad_norms": GradwatchGradNorms,
    "wandb_gradients": Wandb,
    "wandb_all": WandbAll,
    "tensorboard_scalars": TensorBoardScalars,
    "tensorboard_histograms": TensorBoardHistograms,
    "mlflow_sync": MlflowSync,
    "mlflow_async": MlflowAsync,
    "aim": Aim,
}


def build(name: str, model: nn.Module, optimizer: torch.optim.Optimizer, workdir: Path) -> Variant:
    """The variant ``name`` on this model copy (:class:`UnavailableError`: not here)."""
    package = NEEDS.get(name)
    if package is not None and importlib.util.find_spec(package) is None:
        raise UnavailableError(f"{package} is not installed (pip install -r {REQUIREMENTS})")
    workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(sys.stderr):  # keep the progress output readable
        return FACTORIES[name](model, optimizer, workdir)


REQUIREMENTS = "benchmarks/requirements-peers.txt"
