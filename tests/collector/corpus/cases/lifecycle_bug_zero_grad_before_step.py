# expect: grad-zeroed-before-step at step 1
"""Bug: zero_grad() moved between backward() and step() (meant as "clean up before the next
batch"): every step applies zero gradients and the model never trains. Twin: ok_basic_sgd."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.zero_grad()
    opt.step()
