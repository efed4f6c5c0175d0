# expect: param-no-grad at step 1
"""Bug: the loss rebuilt from .item() values, then given requires_grad=True to
silence torch's error: backward() reaches no parameter (the twin keeps the tensor loss)."""

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
    errors = [((o - t) ** 2).item() for o, t in zip(out, y, strict=True)]
    loss = torch.tensor(sum(errors) / len(errors), requires_grad=True)
    loss.backward()
    opt.step()
