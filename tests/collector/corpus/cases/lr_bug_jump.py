# expect: lr-jump at step 151
"""Bug: at step 151 a schedule bug sets the learning rate to 0.01 x 1e6 (a unit mix-up);
the lr-jump finding comes at that step, before the gradients and the loss blow up."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 201):
    if step == 151:
        for group in opt.param_groups:
            group["lr"] *= 1e6
    x = torch.randn(32, 16)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :4].sum(dim=1, keepdim=True).tanh()).backward()
    opt.step()
