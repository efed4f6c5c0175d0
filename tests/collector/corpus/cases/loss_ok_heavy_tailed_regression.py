# expect: quiet
"""Correct: a polynomial fit on x, x², x³, x⁴ of Gaussian x, updated by hand with plain
SGD (the shape of pytorch/examples' regression). x⁴ is heavy-tailed, so a batch with one
large x kicks the weights and the loss has bursts in which the median of ten stands 20–80×
its best for up to ~two windows before it settles again: no loss-diverging."""

import torch
from torch.nn import functional as F

torch.manual_seed(48)  # a seed whose longest burst (23 losses) is the longest of 200
w_true = torch.randn(4, 1) * 5
b_true = torch.randn(1) * 5
fc = torch.nn.Linear(4, 1)
for step in range(900):
    r = torch.randn(32)
    x = torch.stack([r**k for k in range(1, 5)], dim=1)
    y = x @ w_true + b_true
    fc.zero_grad()
    loss = F.smooth_l1_loss(fc(x), y)
    loss.backward()
    with torch.no_grad():
        for p in fc.parameters():
            p.add_(-0.1 * p.grad)
    if loss.item() < 1e-3:
        break
