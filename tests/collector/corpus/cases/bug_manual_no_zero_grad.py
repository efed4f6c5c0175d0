# expect: stale-grad at step 2
"""Bug: SGD by hand that never clears the gradients: each update applies the sum
of every gradient so far (the twin of ok_manual_sgd_data)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
lr = 0.05
for step in range(60):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    for p in model.parameters():
        p.data.add_(-lr * p.grad)
