"""The demo's training script: one short, real training under gradwatch, in one variant.

``python -m gradwatch.demo.training VARIANT [--steps N] [--server URL] [--step-delay S]`` trains a
small regression MLP on synthetic data (CPU, one thread, seeded: bit-identical when
repeated) in one of these ways:

* ``replicate-a``, ``replicate-b``: correct and identical (same config, same seed);
* ``drifting``: the same config and seed, but from step ``steps // 3`` its data loader
  hands batches in another order (a reshuffle the config does not show): a replicate that
  silently stops being identical;
* ``stale-grad``: ``optimizer.zero_grad()`` is missing (gradients pile up);
* ``nan-onset``: at step ``steps // 2`` a learning-rate schedule bug multiplies the
  learning rate by 1e6; the loss and gradients overflow to Inf and NaN within a few steps.

Every run logs its own metrics with ``run.log``: ``train/loss`` and ``train/mae`` each step,
``val/loss`` and ``val/mae`` on a held-out batch every ``VAL_EVERY`` steps.

``gradwatch demo`` runs all five in subprocesses. Standard library and torch only.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import gradwatch

VARIANTS = ("replicate-a", "replicate-b", "drifting", "stale-grad", "nan-onset")
PROJECT = "demo"
BATCH = 32
VAL_EVERY = 10  # steps between evaluations on the held-out batch


def config(variant: str, steps: int) -> dict[str, object]:
    """The run's config: the three replicates share it, the buggy runs differ by ``script``."""
    script = variant if variant in ("stale-grad", "nan-onset") else "baseline"
    return {
        "script": script,
        "lr": 0.01,
        "momentum": 0.0,
        "batch": BATCH,
        "steps": steps,
        "seed": 0,
        "model": "mlp-16-64-64-1",
    }


def batches(steps: int, drift_from: int | None) -> list[int]:
    """The order in which the data loader hands out the batches, one index per step."""
    order = torch.randperm(steps, generator=torch.Generator().manual_seed(1)).tolist()
    if drift_from is not None:
        tail = order[drift_from:]
        order[drift_from:] = tail[1:] + tail[:1]  # the silent reshuffle
    return order


def train(variant: str, steps: int, server: str | None, delay: float) -> str:
    """Train ``variant``; the run id."""
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    torch.set_num_threads(1)  # tiny model: threads only add contention
    torch.manual_seed(0)
    x = torch.randn(steps * BATCH, 16)
    y = (x[:, :4].sum(dim=1, keepdim=True) + 0.1 * torch.randn(steps * BATCH, 1)).tanh()
    model = nn.Sequential(
        nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    held_x = torch.randn(256, 16, generator=torch.Generator().manual_seed(2))
    held_y = (held_x[:, :4].sum(dim=1, keepdim=True)).tanh()
    order = batches(steps, steps // 3 if variant == "drifting" else None)
    with gradwatch.watch(
        model,
        opt,
        project=PROJECT,
        name=variant,
        server=server,
        config=config(variant, steps),
        tags=["demo"],
    ) as run:
        for step, b in enumerate(order, start=1):
            if variant != "stale-grad":
                opt.zero_grad()
            if variant == "nan-onset" and step == steps // 2:
                for group in opt.param_groups:
                    group["lr"] *= 1e6
            rows = slice(b * BATCH, (b + 1) * BATCH)
            guess = model(x[rows])
            loss = nn.functional.mse_loss(guess, y[rows])
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            out = {
                "train/loss": loss.detach(),
                "train/mae": (guess.detach() - y[rows]).abs().mean(),
            }
            if step % VAL_EVERY == 0 or step == steps:
                with torch.no_grad():  # not a training forward: gradwatch leaves it alone
                    held = model(held_x)
                out["val/loss"] = nn.functional.mse_loss(held, held_y)
                out["val/mae"] = (held - held_y).abs().mean()
            run.log(out)  # the user's own metrics, drawn on the run page by prefix
            if delay:
                time.sleep(delay)
    return run.id


def main(argv: list[str] | None = None) -> None:
    """Command line of one demo training."""
    p = argparse.ArgumentParser(prog="python -m gradwatch.demo.training", description=__doc__)
    p.add_argument("variant", choices=VARIANTS)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--server", help="stream to this gradwatch server as well")
    p.add_argument("--step-delay", type=float, default=0.0, help="sleep after each step (s)")
    args = p.parse_args(argv)
    print(train(args.variant, args.steps, args.server, args.step_delay))


if __name__ == "__main__":
    main()
