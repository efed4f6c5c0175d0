"""A Hugging Face Transformers callback: ``Trainer(..., callbacks=[GradwatchCallback()])``.

It watches the trainer's model with the real optimizer (unwrapped from Accelerate's
``AcceleratedOptimizer``) when training begins, declares the trainer's gradient
accumulation (``accumulation_steps``) unless given, files the ``TrainingArguments`` as
the run's config, and closes the run when training ends. Importing this module imports
``transformers``.

Example::

    from gradwatch.integrations.huggingface import GradwatchCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[GradwatchCallback(project="bert")])
    trainer.train()
"""

from __future__ import annotations

from typing import Any

import torch

from gradwatch.integrations import checked_options, require

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError:  # pragma: no cover - exercised only without transformers
    require("transformers")

from gradwatch.session.attach import watch
from gradwatch.session.handle import Run

_CONFIG_KEYS = (
    "learning_rate",
    "weight_decay",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_steps",
    "num_train_epochs",
    "seed",
    "bf16",
    "fp16",
    "max_grad_norm",
    "lr_scheduler_type",
    "warmup_steps",
)


def _unwrap(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Accelerate's AcceleratedOptimizer keeps the real one in ``.optimizer``."""
    inner = getattr(optimizer, "optimizer", None)
    return _unwrap(inner) if isinstance(inner, torch.optim.Optimizer) else optimizer


class GradwatchCallback(TrainerCallback):  # type: ignore[misc]
    """Watches the Trainer's model; options as for :func:`gradwatch.watch`."""

    def __init__(self, **options: Any) -> None:
        self.options = checked_options(options)
        self.run: Run | None = None

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        if model is None or optimizer is None or (self.run is not None and not self.run.closed):
            return
        options = dict(self.options)
        options.setdefault("accumulation_steps", args.gradient_accumulation_steps)
        options.setdefault("config", {k: getattr(args, k, None) for k in _CONFIG_KEYS})
        self.run = watch(model, _unwrap(optimizer), **options)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """What the Trainer logs (``loss``, ``learning_rate``, ``grad_norm``, ``eval_*``,
        every ``logging_steps``) as the run's own metrics (``run.log``), drawn on its run
        page; values that are not numbers (a run's total FLOs as text) are left out."""
        if self.run is None or self.run.closed or not logs:
            return
        numbers = {
            str(k): float(v)
            for k, v in logs.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        if numbers:
            self.run.log(numbers)

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if self.run is not None:
            self.run.close()
