"""Policy ``checkpoint``: save the last good state before a bad update, then raise.

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

from gradwatch.batch import resolve

if TYPE_CHECKING:
    from gradwatch.findings import Finding
    from gradwatch.run import Run

FORMAT = "gradwatch-checkpoint/1"


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

    def __init__(self, run: Run) -> None:
        self.run = run

    def save(self, f: Finding) -> str:
        """Save now (in the step pre-hook: the parameters are still the pre-update ones)."""
        run = self.run
        watch = run.watches[f.optimizer or 0]
        step = f.step if f.step is not None else watch.step + 1
        batch = watch.pending.batch
        origin = getattr(run, "nan_origin", None)
        state = {
            "format": FORMAT,
            "run": run.id,
            "check": f.check,
            "step": step,
            "completed_steps": [w.step for w in run.watches],
            "models": {key: m.state_dict() for key, m in run.model_hooks.models.items()},
            "optimizers": [w.optimizer.state_dict() for w in run.watches],
            "rng": rng_states(),
            "rng_before_forward": None if origin is None else origin.rng_before_forward(),
            "batch_checksum": None if batch is None else [float(x) for x in resolve(batch).cpu()],
            "batch_signature": list(watch.pending.batch_sig),
        }
        folder = run.dir / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"step-{step}-{f.check}.pt"
        tmp = path.with_suffix(".pt.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        return str(path)


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
