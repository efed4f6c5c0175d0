# expect: stale-grad at step 2
"""Bug: no zero_grad(), so every step applies the sum of all gradients so far."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
