# expect: lr-collapse at steps 181-230 role cause
"""Bug: StepLR(step_size=30, gamma=0.1) is meant for epochs but stepped after every batch:
by step 181 the learning rate is 1e-6 of its start and training silently stops (the
finding comes once the collapse has lasted 50 steps, or earlier — at step 213 — when
tensors stop changing at all; those are its consequence, not a cause of their own). The fix
steps it once per epoch (see lr_ok_schedulers_over_the_run)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
for epoch in range(3):
    for batch in range(100):
        x = torch.randn(32, 8)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), x[:, :2].sum(dim=1, keepdim=True)).backward()
        opt.step()
        sched.step()  # the bug: belongs after the inner loop
