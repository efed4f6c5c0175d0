# expect: accumulation-wiped at step 2
# run-args: --accumulation-steps 4
"""Bug: as bug_lifecycle_zero_grad_every_batch, accumulation declared."""

import torch
from torch import nn

K = 4  # micro-batches per optimizer step
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(120):
    x = torch.randn(16, 4)
    opt.zero_grad()  # the bug: every micro-batch
    (nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)) / K).backward()
    if (step + 1) % K == 0:
        opt.step()
