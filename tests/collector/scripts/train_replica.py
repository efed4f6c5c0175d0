"""A small real training run for the drift tests; every knob is a flag, none in the config.

Usage: python train_replica.py DATA_DIR [--init-seed N] [--shuffle-seed N] [--threads N]
[--lr X] [--steps N] [--perturb-step K --perturb-param NAME] [--torch-version TEXT]
[--bug] [--shuffle-from-epoch E] [--sleep-after K] [--project P]. Prints ``run <id>``. The config
(hashed for replicate groups) holds only ``lr``, ``hidden`` and ``steps``, so seeds,
threads and the bug leave the group alone. Epochs are 8 steps; epochs before
``--shuffle-from-epoch`` shuffle with seed 0 whatever ``--shuffle-seed`` says.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gradwatch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("--init-seed", type=int, default=0)
    p.add_argument("--shuffle-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--perturb-step", type=int, default=0)
    p.add_argument("--perturb-param", default="")
    p.add_argument("--torch-version", default="")
    p.add_argument("--bug", action="store_true")
    p.add_argument("--shuffle-from-epoch", type=int, default=0)
    p.add_argument("--project", default="drift")
    p.add_argument("--sleep-after", type=int, default=0, help="sleep 0.3 s per step after it")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.torch_version:  # stands in for an upgraded library: the fingerprint reads this
        torch.__version__ = args.torch_version  # type: ignore[assignment]
    data = torch.Generator().manual_seed(1234)
    x = torch.randn(512, 64, generator=data)
    y = x[:, :4].sum(1, keepdim=True).tanh() + 0.1 * torch.randn(512, 1, generator=data)
    torch.manual_seed(args.init_seed)
    hidden = 256
    model = nn.Sequential(nn.Linear(64, hidden), nn.Tanh(), nn.Linear(hidden, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    shuffle = torch.Generator()
    config = {"lr": args.lr, "hidden": hidden, "steps": args.steps}
    params = dict(model.named_parameters())
    run = gradwatch.watch(model, opt, data_dir=args.data_dir, project=args.project, config=config)
    print(f"run {run.id}", flush=True)
    step, epoch = 0, 0
    while step < args.steps:
        seed = args.shuffle_seed if epoch >= args.shuffle_from_epoch else 0
        loader = DataLoader(
            TensorDataset(x, y), batch_size=64, shuffle=True, generator=shuffle.manual_seed(seed)
        )
        epoch += 1
        for xb, yb in loader:
            step += 1
            opt.zero_grad()
            target = yb * 3.0 if args.bug else yb  # the silent bug: targets in the wrong unit
            loss = (model(xb) - target).pow(2).mean()
            loss.backward()
            if step == args.perturb_step:  # a nondeterministic kernel, emulated
                noise = 1.0 + int.from_bytes(os.urandom(2), "little") / 65536.0
                grad = params[args.perturb_param].grad
                assert grad is not None
                grad.view(-1)[0] += 1e-4 * noise
            opt.step()
            if args.sleep_after and step >= args.sleep_after:
                time.sleep(0.3)  # a slow run, so that the test sees it while it trains
            if step == args.steps:
                break
    run.close()


if __name__ == "__main__":
    main()
