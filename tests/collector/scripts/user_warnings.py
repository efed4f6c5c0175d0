"""A training script that prints warnings of its own and PyTorch's broadcast warning; its
stderr must read the same with and without gradwatch (tests/collector/session/test_warnings.py)."""

import sys
import warnings

import torch
from torch import nn

torch.manual_seed(0)
warnings.warn("the script's own warning", stacklevel=1)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
criterion = nn.MSELoss()
if len(sys.argv) > 1:  # watched by hand, after the script's first warnings
    import gradwatch

    gradwatch.watch(model, opt, data_dir=sys.argv[1])
for _ in range(3):
    warnings.warn("a warning shown once per line", stacklevel=1)
    opt.zero_grad()
    x = torch.randn(8, 3)
    loss = nn.functional.mse_loss(model(x), torch.randn(8))  # (8, 1) against (8,)
    loss = loss + criterion(model(x), torch.randn(8))
    loss.backward()
    opt.step()
