# expect: quiet
"""Correct: StepLR, LinearLR decay to ~0, OneCycleLR, ReduceLROnPlateau, ExponentialLR
and a constant LR, each sized for and stepped over its own 300-step run (ReduceLROnPlateau once per
30-step epoch) (one model and
optimizer per scheduler, trained one after the other)."""

import torch
from torch import nn
from torch.optim import lr_scheduler as S

STEPS, EPOCH = 300, 30
MAKERS = {
    "StepLR": lambda o: S.StepLR(o, step_size=100, gamma=0.1),
    "LinearLR": lambda o: S.LinearLR(o, start_factor=1.0, end_factor=1e-3, total_iters=STEPS),
    "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=0.05, total_steps=STEPS),
    "ReduceLROnPlateau": lambda o: S.ReduceLROnPlateau(o, factor=0.5, patience=2),
    "ExponentialLR": lambda o: S.ExponentialLR(o, gamma=0.99),
    "constant": lambda o: None,
}
for name, make in MAKERS.items():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = make(opt)
    for step in range(STEPS):
        x = torch.randn(32, 8)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), x[:, :2].sum(dim=1, keepdim=True))
        loss.backward()
        opt.step()
        if isinstance(sched, S.ReduceLROnPlateau):
            if step % EPOCH == EPOCH - 1:  # once per "epoch", on its loss (as documented)
                sched.step(loss.item())
        elif sched is not None:
            sched.step()
