# expect: quiet
"""Correct: OneCycleLR sized to the run (as bot66/MNISTDiffusion uses it) anneals Adam's
rate to max_lr / 25 / 1e4 = 4e-10 on the last steps; LayerNorm weights near 1 then stop
changing at all (their updates round to nothing). A schedule that reaches its floor only
in the last percent of the run is the schedule ending, not a collapse."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 1))
steps = 320
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-4, total_steps=steps)
for step in range(steps):
    x = torch.randn(32, 8)
    loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
