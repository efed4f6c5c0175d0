# expect: param-no-grad at step 3
"""clip_grad_value_ with clip_value=0: every gradient is clipped to exactly zero, so the
parameters never change. Missed before (nothing was reported)."""

import torch
from _setup import regression, seeded_mlp

model = seeded_mlp(8, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
batch = regression(8, inputs=1)
for step in range(10):
    x, y = batch()
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=0.0)
    opt.step()
