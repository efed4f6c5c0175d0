# expect: quiet
# run-args: --accumulation-steps 4
"""Correct: clipping after each micro-batch's backward with gradient accumulation, and
clipping another model's parameters (an EMA copy) before backward."""

import copy

import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_

K = 4
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
ema = copy.deepcopy(model)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(30):
    clip_grad_norm_(ema.parameters(), 1.0)  # another model's parameters: not this step's
    for micro in range(K):
        x = torch.randn(16, 4)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)) / K
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)  # after this micro-batch's backward
    opt.step()
    opt.zero_grad(set_to_none=True)
