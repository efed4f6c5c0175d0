# expect: lr-collapse at steps 54-103 role cause
# expect: param-not-updated role consequence
"""Bug: a Lightning-style `StepLR(step_size=1, gamma=0.8)` meant per epoch is stepped
every batch under Adam: by step 54 the rate is below 1e-5 of its peak, and a few steps
later the updates round to nothing, so the parameters stop changing. The learning rate
must lead the incident as its cause, with the stuck tensors as its consequence (not the
other way round, although the stuck tensors can show before the collapse has lasted 50
steps). The fixed twin is lr_ok_scheduler_per_epoch_adam."""

import torch
from _setup import seeded_mlp
from torch import nn

model = seeded_mlp(16, 64, 64, 1)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
w = torch.randn(16, 1)
for epoch in range(4):
    for batch in range(50):
        x = torch.randn(32, 16)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), x @ w).backward()
        opt.step()
        sched.step()  # the bug: belongs after the inner loop
