# expect: param-no-grad at step 1
"""Bug: the output is detached before the loss, and loss.requires_grad = True hides
the error torch would raise."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(20):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    opt.zero_grad()
    out = model(x)
    loss = nn.functional.mse_loss(out.detach(), y)
    loss.requires_grad = True
    loss.backward()
    opt.step()
