# expect: vanishing-grad at steps 20-25
"""Bug: twelve sigmoid layers without normalisation or residuals, trained by SGD: the first
layer's gradient is below 1e-3 of the last layer's, and so is its pace — it does not train.
Twins: numerics_ok_deep_tanh_150; numerics_ok_deep_sigmoid_adam (Adam moves every layer by
about the learning rate)."""

import torch
from torch import nn

torch.manual_seed(0)
layers = []
for i in range(12):
    layers += [nn.Linear(6 if i == 0 else 8, 8), nn.Sigmoid()]
model = nn.Sequential(*layers, nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(30):
    x = torch.randn(32, 6)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :3]).backward()
    opt.step()
