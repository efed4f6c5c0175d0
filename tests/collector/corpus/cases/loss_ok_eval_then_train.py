# expect: quiet
"""Correct twin of loss_bug_eval_mode_training: model.train() after each evaluation."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1)
)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(60):
    if step % 10 == 0:
        model.eval()
        with torch.no_grad():
            val = model(torch.randn(64, 8))
        model.train()
    x = torch.randn(32, 8)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :1]).backward()
    opt.step()
