# expect: vanishing-grad at steps 1-10
"""Bug: twelve sigmoid layers without normalisation or residuals: the first layer's gradient
is below 1e-3 of the last layer's and it barely trains. Twin: numerics_ok_deep_tanh_150."""

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
