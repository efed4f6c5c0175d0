# expect: nonfinite-loss at step 30 role cause
"""Bug: one input batch holds a NaN (a corrupt record). The non-finite loss is the root cause
of its incident (NaN provenance traces it to the input); what follows is its evidence."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 41):
    x = torch.randn(32, 4)
    if step == 30:
        x[3, 1] = float("nan")
    y = x.sum(dim=1, keepdim=True)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
