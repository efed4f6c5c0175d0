# expect: quiet
"""Correct: a CNN whose conv layers keep their bias before BatchNorm — those biases get
gradients that are zero up to rounding and jump by orders of magnitude between steps."""

import torch
from _setup import seeded_conv_bn_net
from torch import nn

model = seeded_conv_bn_net(1, 2, 3)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(200):
    x = torch.randn(16, 1, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) * 10).long().clamp(-1, 1) + 1
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
