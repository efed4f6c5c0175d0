"""A small DDP training script for the cross-rank tests (run under torchrun, gloo, CPU).

    torchrun --standalone --nproc-per-node 2 ddp_train.py DATA_DIR|- SCENARIO [SCENARIO ...]

Each scenario is one run (``watch()`` on every rank, ``ddp_every=5``, 12 steps):

* ``correct``: plain DDP training, nothing wrong;
* ``desync``: after step 6, rank 1 nudges a weight outside the DDP wrapper and the
  optimizer (the replicas silently diverge; DDP does not notice);
* ``spread``: rank 1's targets are 30× larger (its loss is ~900× rank 0's);
* ``nan``: rank 1's batch of step 8 holds a NaN (its loss is the origin; the all-reduce
  spreads NaN gradients to every rank).

With ``-`` for DATA_DIR the script never calls ``watch()`` (for ``gradwatch run``).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gradwatch

STEPS = 12


def train(scenario: str, data_dir: str | None) -> None:
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = None
    if data_dir is not None:
        run = gradwatch.watch(
            model, opt, project="ddp-test", name=scenario, data_dir=data_dir, ddp_every=5
        )
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    for i in range(STEPS):
        x, y = torch.randn(16, 6, generator=data), torch.randn(16, 2, generator=data)
        if scenario == "spread" and rank == 1:
            y = y * 30
        if scenario == "nan" and rank == 1 and i == 7:
            x[0, 0] = float("nan")
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if scenario == "desync" and rank == 1 and i == 5:
            with torch.no_grad():
                model.module[0].weight[0, 0] += 1e-3
    if run is not None:
        run.close()


def main() -> None:
    data_dir, scenarios = sys.argv[1], sys.argv[2:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    for scenario in scenarios:
        train(scenario, None if data_dir == "-" else os.path.join(data_dir, scenario))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
