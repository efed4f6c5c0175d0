# expect: quiet
"""Correct twin of coverage_bug_layerwise_lr_rounds_to_zero: layer-wise rates as floats
(``base * (depth / 3)``), smaller for lower layers but never zero."""

import torch
from torch import nn

torch.manual_seed(0)
layers = [nn.Linear(8, 32), nn.Linear(32, 32), nn.Linear(32, 1)]
model = nn.Sequential(layers[0], nn.ReLU(), layers[1], nn.ReLU(), layers[2])
base = 0.05
groups = [
    {"params": layer.parameters(), "lr": base * ((i + 1) / 3)} for i, layer in enumerate(layers)
]
opt = torch.optim.SGD(groups, lr=base)
for step in range(60):
    x = torch.randn(32, 8)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :1]).backward()
    opt.step()
