# expect: quiet
"""Correct twin of numerics_bug_nan_param_adam_eps_zero: Adam's default eps."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(60):
    x = torch.randn(32, 8)
    x[:, 7] = 0.0
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :1]).backward()
    opt.step()
