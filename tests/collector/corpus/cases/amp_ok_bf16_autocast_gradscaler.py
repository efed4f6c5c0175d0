# expect: quiet
"""Correct mixed precision on the CPU: a small conv net with BatchNorm under
`torch.autocast("cpu", dtype=torch.bfloat16)` with a `GradScaler("cpu")` used as
documented (`scale(loss).backward()`, `scaler.step(opt)`, `scaler.update()`). The bf16
rounding of activations and gradients is no finding. Bug twin: amp_bug_step_without_scaler."""

import torch
from _setup import seeded_conv_bn_net
from torch import nn

model = seeded_conv_bn_net(3, 1, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
for step in range(1, 121):
    x = torch.randn(16, 3, 8, 8)
    y = (x.mean(dim=(2, 3)) > 0).long().sum(dim=1).clamp(max=3)
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
