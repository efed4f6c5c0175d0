# expect: quiet
"""Fixed twin of lr_bug_scheduler_per_batch_params_stop: the same `StepLR(step_size=1,
gamma=0.8)` under Adam, stepped once per epoch as it was built for."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
w = torch.randn(16, 1)
for epoch in range(4):
    for batch in range(50):
        x = torch.randn(32, 16)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), x @ w).backward()
        opt.step()
    sched.step()
