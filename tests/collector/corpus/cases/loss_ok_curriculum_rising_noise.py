# expect: quiet
"""Correct: curriculum learning: the noise in the targets grows every 50 steps, so the
loss rises in steps (to 75x its best) while the model keeps learning at its usual pace:
the rise is the data's, not the optimisation's, so no loss-diverging."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
w = torch.randn(10, 1)
for step in range(300):
    level = step // 50
    x = torch.randn(64, 10)
    y = x @ w + (0.05 * 3**level) * torch.randn(64, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
