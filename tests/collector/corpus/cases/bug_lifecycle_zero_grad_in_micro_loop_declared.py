# expect: accumulation-wiped at step 2
# run-args: --accumulation-steps 4
"""Bug: as bug_lifecycle_zero_grad_in_micro_loop, with the accumulation declared."""

import torch
from torch import nn

K = 4  # micro-batches per optimizer step
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(30):
    for micro in range(K):
        opt.zero_grad(set_to_none=True)  # the bug: nanoGPT's zero_grad moved into this loop
        x = torch.randn(16, 4)
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)) / K
        loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
