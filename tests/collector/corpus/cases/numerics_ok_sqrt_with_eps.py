# expect: quiet
"""Correct twin of numerics_bug_sqrt_at_zero: the square root of the sum of squares plus a
small epsilon is differentiable everywhere."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(60):
    x = torch.randn(32, 8)
    z = model(x)
    dist = (((z.unsqueeze(0) - z.unsqueeze(1)) ** 2).sum(dim=-1) + 1e-8).sqrt()
    opt.zero_grad()
    (dist.mean() - 1.0).pow(2).backward()
    opt.step()
