# expect: quiet
"""Correct twin of coverage_bug_clip_value_zero: a positive clip value."""

import torch
from _setup import regression, seeded_mlp

model = seeded_mlp(8, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
batch = regression(8, inputs=1)
for step in range(10):
    x, y = batch()
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=0.5)
    opt.step()
