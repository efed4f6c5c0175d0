# expect: quiet
"""Correct: a 150-layer tanh MLP (orthogonal initialisation, the usual one for such depth)
trained with SGD. Gradient and update sizes differ by orders of magnitude between layers
and steps; nothing of it is a bug to warn about."""

import torch
from torch import nn

torch.manual_seed(0)
layers: list[nn.Module] = []
for k in range(150):
    linear = nn.Linear(16, 16)
    nn.init.orthogonal_(linear.weight)
    nn.init.zeros_(linear.bias)
    layers += [linear, nn.Tanh()]
model = nn.Sequential(*layers, nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(60):
    x = torch.randn(32, 16)
    y = x[:, :2].sum(dim=1, keepdim=True)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
