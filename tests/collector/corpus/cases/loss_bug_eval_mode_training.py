# expect: eval-mode-training at step 11
"""Bug: evaluation after 10 steps calls model.eval() and training goes on without
model.train(): dropout is off and BatchNorm stops updating its statistics."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1)
)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    if step == 10:
        model.eval()
        with torch.no_grad():
            val = model(torch.randn(64, 8))
    x = torch.randn(32, 8)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x[:, :1]).backward()
    opt.step()
