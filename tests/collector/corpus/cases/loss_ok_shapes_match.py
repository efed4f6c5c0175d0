# expect: quiet
"""Correct twin of loss_bug_shape_mismatch: the prediction is squeezed to (N,)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(60):
    x = torch.randn(32, 4)
    y = x.sum(dim=1)
    opt.zero_grad()
    nn.functional.mse_loss(model(x).squeeze(-1), y).backward()
    opt.step()
