"""Policy ``checkpoint``: save the last good state before a bad update, then raise.

Which state is the last good one: a check of the step's own facts (``stale-grad``, …) or
of values that a bad *batch* spoils (a NaN input) stops before the update that would
apply them — the current state. But a loss or gradient that is non-finite or explodes
because the *previous* update broke the parameters (a learning rate of 1e38) comes one
step late: then the current state already holds the bad update. So while such a check
has policy ``checkpoint``, the state before each update is kept (one copy of the models
and optimizers, made at the end of the step pre-hook), and the kept one is saved instead
when the previous update was bad: it left a non-finite parameter, or it moved the
parameters by more than their own norm (``BAD_UPDATE``).

The file ``<run dir>/checkpoints/step-<k>-<check>.pt`` (step ``k`` is the one that was not
applied) is a ``torch.save`` of plain containers, tensors and numbers only, so it loads
with ``torch.load(path, weights_only=True)``::

    {
        "format": "gradwatch-checkpoint/1",
        "run": run id, "check": check id, "step": k,
        "completed_steps": [optimizer steps completed, per watched optimizer],
        "models": {model key ("" for a single model): model.state_dict()},
        "optimizers": [optimizer.state_dict(), per watched optimizer, in watch() order],
        "rng": {"torch": ByteTensor, "cuda": [ByteTensor per device],
                "python": random.getstate(), "numpy": {...} when numpy is loaded},
        "rng_before_forward": {"torch": ByteTensor} (at step k's first forward) or None,
        "batch_checksum": [sum, position-weighted sum] of step k's batch, or None,
        "batch_signature": ["float32[32, 6]", ...],
        "bad_update_step": k (only in a kept state: the update that broke θ was step k),
    }

:func:`restore` puts a model, its optimizer and the RNG states back from such a file.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from gradwatch.core import checkids
from gradwatch.stats.batch_checksum import resolve

if TYPE_CHECKING:
    from gradwatch.checks.findings import Finding
    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch

FORMAT = "gradwatch-checkpoint/1"
#: checks whose values come from the parameters the previous update left
LATE_CHECKS = frozenset(
    {
        checkids.NONFINITE_LOSS,
        checkids.NONFINITE_GRAD,
        checkids.EXPLODING_GRAD,
        checkids.VANISHING_GRAD,
    }
)
BAD_UPDATE = 1.0  # ‖θ_after − θ_before‖ / ‖θ_before‖ above which an update broke θ


def rng_states() -> dict[str, Any]:
    """Every generator state a training script usually depends on."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    cuda: Any = torch.cuda  # is_initialized is untyped; it never initialises CUDA itself
    if cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        states["numpy"] = {
            "name": str(name),
            "keys": torch.from_numpy(keys.astype("int64")),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_states` saved (the parts present)."""
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "python" in states:
        random.setstate(states["python"])
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    if "numpy" in states:
        import numpy

        s = states["numpy"]
        keys = s["keys"].numpy().astype(numpy.uint32)
        numpy.random.set_state((s["name"], keys, s["pos"], s["has_gauss"], s["cached_gaussian"]))


class CheckpointSaver:
    """Writes the checkpoint of a run (``FindingSink.checkpoint``)."""

    def __init__(self, run: HookContext[OptimizerWatch]) -> None:
        self.run = run
        #: whether the state before each update is kept (see the module's docstring)
        self.keeping = any(run.options.policy(c) == "checkpoint" for c in LATE_CHECKS)
        self._kept: dict[str, Any] | None = None

    def _state(self, optimizer: int, step: int, *, copy: bool = False) -> dict[str, Any]:
        run = self.run
        watch = run.watches[optimizer]
        batch = watch.pending.batch
        state = {
            "format": FORMAT,
            "run": run.id,
            "step": step,
            "completed_steps": [w.step for w in run.watches],
            "models": {key: m.state_dict() for key, m in run.model_hooks.models.items()},
            "optimizers": [w.optimizer.state_dict() for w in run.watches],
            "rng": rng_states(),
            "rng_before_forward": run.nan_origin.rng_before_forward(),
            "batch_checksum": None if batch is None else [float(x) for x in resolve(batch).cpu()],
            "batch_signature": list(watch.pending.batch_sig),
        }
        return _cloned(state) if copy else state

    def keep(self, optimizer: int, step: int) -> None:
        """End of a step pre-hook that found nothing: the state before this update."""
        if self.keeping:
            self._kept = self._state(optimizer, step, copy=True)

    def save(self, f: Finding) -> str:
        """Save now (in the step pre-hook: the parameters are still the pre-update ones),
        or the kept state before the previous update when that update was bad."""
        run = self.run
        optimizer = f.optimizer or 0
        step = f.step if f.step is not None else run.watches[optimizer].step + 1
        state = self._state(optimizer, step)
        kept = self._kept
        if f.check in LATE_CHECKS and kept is not None and _broke(kept, state):
            state = {**kept, "bad_update_step": kept["step"]}
        state["check"] = f.check
        folder = run.dir / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"step-{state['step']}-{f.check}.pt"
        tmp = path.with_suffix(".pt.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        return str(path)


def _cloned(value: Any) -> Any:
    """A copy of a state's tensors (the containers rebuilt, everything else shared)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cloned(v) for v in value]
    return value


def _broke(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether the update between two saved states left a non-finite parameter or moved
    the parameters by more than ``BAD_UPDATE`` times their norm."""
    moved = total = 0.0
    for key, model in after["models"].items():
        for name, now in model.items():
            then = before["models"][key].get(name)
            if not isinstance(now, torch.Tensor) or not now.is_floating_point():
                continue
            if not bool(torch.isfinite(now).all()):
                return True
            if isinstance(then, torch.Tensor) and then.shape == now.shape:
                moved += float((now.double() - then.double()).norm()) ** 2
                total += float(then.double().norm()) ** 2
    return moved > (BAD_UPDATE**2) * total


def restore(
    path: str | os.PathLike[str],
    models: torch.nn.Module | Mapping[str, torch.nn.Module],
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] = (),
    *,
    rng: bool = True,
) -> dict[str, Any]:
    """Load a checkpoint (``weights_only=True``) into ``models`` and ``optimizers`` (as
    passed to ``watch()``) and, with ``rng``, the generators; returns the whole file."""
    state: dict[str, Any] = torch.load(Path(path), weights_only=True)
    if state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a gradwatch checkpoint (format {state.get('format')!r})")
    mapping = {"": models} if isinstance(models, torch.nn.Module) else dict(models)
    if set(mapping) != set(state["models"]):
        raise ValueError(
            f"{path} holds models {sorted(state['models'])}, got {sorted(mapping)}: pass them "
            "as to watch()"
        )
    for key, model in mapping.items():
        model.load_state_dict(state["models"][key])
    opts = [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)
    for opt, saved in zip(opts, state["optimizers"], strict=False):
        opt.load_state_dict(saved)
    if rng:
        set_rng_states(state["rng"])
    return state
