# expect: quiet
"""Correct bf16 autocast on the CPU without a scaler (bf16 has float32's range, so none is
needed): a small MLP with LayerNorm trained with AdamW; quiet."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
w = torch.randn(16, 1)
for step in range(1, 151):
    x = torch.randn(32, 16)
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pred = model(x)
    nn.functional.mse_loss(pred.float(), x @ w).backward()
    opt.step()
