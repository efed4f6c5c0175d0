# expect: quiet
"""Correct twin of coverage_bug_layerwise_lr_rounds_to_zero: layer-wise rates as floats
(``base * (depth / 3)``), smaller for lower layers but never zero."""

import torch
from _setup import regression, seeded_mlp, train

model = seeded_mlp(8, 32, 32, 1)
base = 0.05
groups = [{"params": model[2 * i].parameters(), "lr": base * ((i + 1) / 3)} for i in range(3)]
opt = torch.optim.SGD(groups, lr=base)
train(model, opt, 60, regression(8, inputs=1))
