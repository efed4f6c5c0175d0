# expect: update-ratio at step 3
"""Bug: SGD at 30 (meant 0.03): each update is many times the weights it changes."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=30.0)
for step in range(12):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(32, 6, generator=g)
    y = x @ torch.linspace(-1.0, 1.0, 18).reshape(6, 3)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
