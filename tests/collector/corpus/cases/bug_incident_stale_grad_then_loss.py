# expect: stale-grad at step 2 role cause
"""Bug: no zero_grad() in a regression loop over 200 steps. Gradients pile up and the
effective step grows: the stale-gradient finding is the cause of the run's one incident
(whatever the loss does after it is evidence under it, not an incident of its own)."""

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
