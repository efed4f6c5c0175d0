# expect: quiet
"""Correct: linear warm-up from 0 over 50 steps, then cosine decay to 0 at the last step
(AdamW, the usual transformer recipe)."""

import math

import torch
from torch import nn

torch.manual_seed(0)
STEPS, WARMUP = 400, 50
model = nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)


def factor(step: int) -> float:
    if step < WARMUP:
        return step / WARMUP
    return 0.5 * (1 + math.cos(math.pi * (step - WARMUP) / (STEPS - WARMUP)))


sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
for step in range(STEPS):
    x = torch.randn(32, 8)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :1] * x[:, 1:2]).backward()
    opt.step()
    sched.step()
