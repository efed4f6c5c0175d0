# expect: frozen-param-changed at step 21
"""Bug: the first layer is frozen after 20 steps (requires_grad_(False)) but zero_grad keeps
zero tensors (set_to_none=False) and SGD's momentum and weight decay go on moving it."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)
for step in range(60):
    if step == 20:
        model[0].requires_grad_(False)
    x = torch.randn(32, 8)
    opt.zero_grad(set_to_none=False)
    nn.functional.mse_loss(model(x), x[:, :1]).backward()
    opt.step()
