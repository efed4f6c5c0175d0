# expect: quiet
"""Correct twin of numerics_bug_bad_batch_explodes: shuffled, augmented batches (random
brightness and contrast, noise, flips) and a ragged last batch per epoch move the input's
scale by up to 2x; no batch is an outlier and nothing is reported."""

import torch
from torch import nn

torch.manual_seed(0)
data = torch.randn(1000, 16)
target = data[:, :4].sum(dim=1, keepdim=True)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(5):
    order = torch.randperm(len(data))
    for start in range(0, len(data), 32):  # the last batch of each epoch holds 8 samples
        idx = order[start : start + 32]
        x, y = data[idx], target[idx]
        gain = torch.empty(len(idx), 1).uniform_(0.5, 2.0)  # contrast
        x = x * gain + 0.1 * torch.randn_like(x) + torch.empty(len(idx), 1).uniform_(-0.2, 0.2)
        if torch.rand(()) < 0.5:
            x = x.flip(dims=[1])
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y * gain).backward()
        opt.step()
