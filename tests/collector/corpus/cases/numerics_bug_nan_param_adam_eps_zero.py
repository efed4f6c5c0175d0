# expect: nonfinite-param at step 1
"""Bug: Adam with eps=0 (set to 'remove the fudge term'): a tensor whose gradient is exactly
zero (an embedding row no batch uses, here a dead input feature) divides 0 by 0."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=0.0)
for step in range(20):
    x = torch.randn(32, 8)
    x[:, 7] = 0.0  # a feature that is always zero: its weights get zero gradients
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :1]).backward()
    opt.step()
