# expect: loss-diverging
"""Bug: a learning rate just past the stable range of a full-batch regression (|1 - lr·λ|
= 1.6 after step 20, under lr-jump's 10x): the loss grows 2.6x per step, slowly enough
that no single gradient step looks like an explosion at first."""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(64, 8)
y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(64, 1)
model = nn.Linear(8, 1)
lam = float(torch.linalg.eigvalsh(2 * x.T @ x / len(x)).max())
opt = torch.optim.SGD(model.parameters(), lr=0.2 / lam)
for step in range(60):
    if step == 20:
        opt.param_groups[0]["lr"] = 2.6 / lam
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
