# expect: quiet
# run-args: --accumulation-steps 4
"""Correct accumulation with the accumulation declared."""

import torch
from torch import nn

K = 4  # micro-batches per optimizer step
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(30):
    for micro in range(K):
        x = torch.randn(16, 4)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)) / K
        loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)  # once per optimizer step, after it
