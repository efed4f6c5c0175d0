# expect: loss-shape-mismatch at step 1
"""Bug: a regression head outputs (N, 1) and the target is (N,): MSELoss broadcasts them to
(N, N) and the model learns the mean of the targets (PyTorch only warns once)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(30):
    x = torch.randn(32, 4)
    y = x.sum(dim=1)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
