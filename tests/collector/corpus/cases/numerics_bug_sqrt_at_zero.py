# expect: nonfinite-grad at step 1
"""Bug: a distance computed as sqrt(sum of squares) is differentiated at zero (a sample
compared with itself): the gradient of sqrt at 0 is infinite, times 0 gives NaN."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(20):
    x = torch.randn(32, 8)
    z = model(x)
    dist = ((z.unsqueeze(0) - z.unsqueeze(1)) ** 2).sum(dim=-1).sqrt()  # zero diagonal
    opt.zero_grad()
    (dist.mean() - 1.0).pow(2).backward()
    opt.step()
