# expect: exploding-grad at step 121 role cause kind input-batch
"""Bug: batch 121 comes from an un-normalised source (features x1000), the gradient of
that step is ~1e3-1e6x its usual size; exploding-grad names that step, led by the outlier
batch (details.batch_outlier), the root cause of its incident. Twin:
numerics_ok_augmented_batches."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(1, 161):
    x = torch.randn(32, 16)
    y = x[:, :4].sum(dim=1, keepdim=True)
    if step == 121:
        x = x * 1000  # the bad batch
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
