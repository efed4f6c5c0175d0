# expect: quiet
"""Correct SGD by hand under torch.no_grad(), gradients set to None by hand."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
lr = 0.05
for step in range(60):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    for p in model.parameters():
        p.grad = None
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
