# expect: quiet
"""Correct: SGD with cosine annealing and warm restarts (SGDR, T_0 = 60): the learning rate
jumps back up at every restart, by the schedule's design."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=60, T_mult=1, eta_min=1e-4)
centers = torch.randn(5, 20)
for step in range(400):
    y = torch.randint(0, 5, (32,))
    x = centers[y] + torch.randn(32, 20)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
