"""Quick start: watch two short trainings, one correct and one missing ``zero_grad``,
then read back what gradwatch recorded (no server needed).

Run it with ``make demo`` or ``python examples/quickstart.py [--data-dir DIR]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn

import gradwatch
from gradwatch.reader import load_run


def train(name: str, *, zero_grad: bool, data_dir: str | None, steps: int = 8) -> Path:
    """A small regression MLP; ``zero_grad=False`` reproduces the stale-gradient bug."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 16), torch.randn(256, 1)
    with gradwatch.watch(
        model,
        opt,
        project="quickstart",
        name=name,
        data_dir=data_dir,
        config={"lr": 0.01, "zero_grad": zero_grad},
    ) as run:
        for step in range(steps):
            if zero_grad:
                opt.zero_grad()
            batch = slice(32 * step, 32 * (step + 1))
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            loss.backward()
            opt.step()
    return run.dir


def show(run_dir: Path) -> None:
    """Print the per-step record: loss, first layer's gradient norm, lifecycle events."""
    run = load_run(run_dir)
    names = run.tensors_of(0)
    print(
        f"\nrun {run.id} ({run.start['name']}), {len(names)} tensors, "
        f"status {run.end['status'] if run.end else 'running'}"
    )
    print(
        f"  {'step':>4}  {'loss':>8}  {'‖g‖ ' + names[0]:>16}  {'‖Δθ‖ ' + names[0]:>18}  lifecycle"
    )
    for row in run.steps[0]:
        events = " → ".join(kind for kind, _, _ in row.events)
        loss = f"{row.loss:8.4f}" if row.loss is not None else "       -"
        print(
            f"  {row.step:>4}  {loss}  {row.stats[0][0]:16.4f}  {row.stats[0][2]:18.6f}  {events}"
        )
    fp = run.fingerprint
    print(
        f"  fingerprint: torch {fp['versions']['torch']}, config hash "
        f"{fp['config_hash'][:12]}, initial params {fp['init_params_hash'][:12]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", help="where runs are spooled (default: GRADWATCH_DIR)")
    args = parser.parse_args()
    print(f"gradwatch {gradwatch.__version__}: recording two runs...")
    good = train("correct", zero_grad=True, data_dir=args.data_dir)
    bad = train("missing-zero-grad", zero_grad=False, data_dir=args.data_dir)
    show(good)
    show(bad)
    print(
        "\nThe second run never clears its gradients: ‖g‖ keeps growing because every "
        "step applies the sum of all earlier gradients (no zero_grad in its lifecycle)."
    )
    print(f"Spooled under {good.parent}; `gradwatch sync --server URL` sends them to a server.")


if __name__ == "__main__":
    main()
