# expect: quiet
"""Correct: the loss of bug_graph_loss_from_item kept as a tensor of the graph."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(60):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    opt.zero_grad()
    out = model(x)
    errors = (out - y) ** 2  # the same loss, kept as tensors
    loss = errors.mean()
    loss.backward()
    opt.step()
