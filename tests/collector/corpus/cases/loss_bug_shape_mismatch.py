# expect: loss-shape-mismatch at step 1
"""Bug: a regression head outputs (N, 1) and the target is (N,): MSELoss broadcasts them to
(N, N) and the model learns the mean of the targets (PyTorch only warns once)."""

import torch
from _setup import regression, seeded_mlp, train

model = seeded_mlp(4, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
train(model, opt, 30, regression(keepdim=False))  # (N, 1) predictions, (N,) targets
