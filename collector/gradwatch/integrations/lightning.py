"""A Lightning callback: ``Trainer(callbacks=[GradwatchCallback(project="p")])``.

It watches the ``LightningModule`` with the trainer's optimizers when training starts
(after the strategy has set them up, so DDP runs get one collector per rank), files the
module's ``hparams`` as the run's config, records what the module logs with ``self.log``
while training as the run's own metrics (``run.log``: drawn on its run page), and closes
the run when training ends (``failed`` on an exception). Importing this module imports
``lightning``.

Example::

    from gradwatch.integrations.lightning import GradwatchCallback

    trainer = lightning.Trainer(max_epochs=3, callbacks=[GradwatchCallback(project="mnist")])
    trainer.fit(model, loader)
"""

from __future__ import annotations

from typing import Any

from gradwatch.integrations import checked_options, require

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - exercised only without lightning
    require("lightning")

from gradwatch.session.attach import watch
from gradwatch.session.handle import Run


class GradwatchCallback(pl.Callback):  # type: ignore[misc]
    """Watches the trained ``LightningModule``; options as for :func:`gradwatch.watch`."""

    def __init__(self, **options: Any) -> None:
        self.options = checked_options(options)
        self.run: Run | None = None
        self._logged: dict[str, Any] = {}  # the value object last recorded per metric

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.run is not None and not self.run.closed:
            return
        options = dict(self.options)
        options.setdefault("accumulation_steps", trainer.accumulate_grad_batches)
        if "config" not in options and pl_module.hparams:
            options["config"] = dict(pl_module.hparams)
        self.run = watch(pl_module, list(trainer.optimizers), **options)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        """What ``self.log`` gave since the last batch, as the run's own metrics: each value
        Lightning holds (``trainer.callback_metrics``) that is a new object since it was last
        recorded, so an epoch's validation metric is recorded once, not on every step.
        Tensors stay where they are (no copy to the host here)."""
        if self.run is None or self.run.closed:
            return
        fresh = {}
        for key, value in trainer.callback_metrics.items():
            if self._logged.get(key) is not value:
                self._logged[key] = value
                fresh[key] = value
        if fresh:
            self.run.log(fresh)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.run is not None:
            self.run.close()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if self.run is not None:
            self.run.close("failed", error=f"{type(exception).__name__}: {exception}")
