# expect: quiet
"""Correct: a classifier trained on batches of 4 with label noise — the loss jumps several
times over from batch to batch while its trend falls (no loss-diverging, no explosion)."""

import torch
from torch import nn

torch.manual_seed(0)
x_all = torch.randn(2000, 10)
y_all = (x_all[:, :3].sum(dim=1) > 0).long()
flip = torch.rand(2000) < 0.2
y_all[flip] = 1 - y_all[flip]  # 20% label noise
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(400):
    idx = torch.randint(0, 2000, (4,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(x_all[idx]), y_all[idx]).backward()
    opt.step()
