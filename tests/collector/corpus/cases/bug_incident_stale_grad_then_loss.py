# expect: stale-grad at step 2 role cause
# expect: loss-diverging role consequence
"""Bug: no zero_grad() in a regression loop. Gradients pile up, the effective step grows and
the loss climbs: the loss warnings are consequences of the stale-gradient incident."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.002)
for step in range(200):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
