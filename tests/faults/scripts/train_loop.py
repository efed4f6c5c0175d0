"""A real training loop under gradwatch, driven by the fault tests.

Usage: python train_loop.py DATA_DIR STEPS [SLEEP_S]. Prints ``run <dir>`` once, then
``step <n> <monotonic time>`` after every optimizer step, and the I/O stats at the end.
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch import nn

import gradwatch


def main() -> None:
    data_dir, steps = sys.argv[1], int(sys.argv[2])
    pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    run = gradwatch.watch(model, opt, data_dir=data_dir, project="faults")
    print(f"run {run.dir}", flush=True)
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = model(torch.randn(16, 32)).pow(2).mean()
        loss.backward()
        opt.step()
        print(f"step {step} {time.monotonic()}", flush=True)
        if pause:
            time.sleep(pause)
    run.close()
    print("stats " + json.dumps(run.io.stats.__dict__), flush=True)


if __name__ == "__main__":
    main()
