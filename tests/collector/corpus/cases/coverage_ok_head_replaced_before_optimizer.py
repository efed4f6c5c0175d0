# expect: quiet
"""Correct twin of coverage_bug_head_replaced_after_optimizer: the head is replaced first and
the optimizer built afterwards."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 10))
model[2] = nn.Linear(32, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    x = torch.randn(32, 8)
    y = x[:, :3].argmax(dim=1)
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
