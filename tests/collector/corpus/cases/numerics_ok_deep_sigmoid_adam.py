# expect: quiet
"""Correct: the twelve sigmoid layers of numerics_bug_vanishing_deep_sigmoid trained by Adam.
The first layer's gradient is still below 1e-3 of the last layer's, but Adam divides each
gradient by its own running RMS: every layer moves by about the learning rate, the first as
fast as the last. vanishing-grad called it a vanishing gradient before it asked whether the
weights stand still."""

import torch
from torch import nn

torch.manual_seed(0)
layers = []
for i in range(12):
    layers += [nn.Linear(6 if i == 0 else 8, 8), nn.Sigmoid()]
model = nn.Sequential(*layers, nn.Linear(8, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(30):
    x = torch.randn(32, 6)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :3]).backward()
    opt.step()
