# expect: quiet
"""Correct twin of lr_bug_adam_rate_x1000: the same net and clipping at AdamW's usual 1e-3,
with a hand-set linear warm-up over 20 steps (nanoGPT's get_lr)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(16, 64),
    nn.LayerNorm(64),
    nn.GELU(),
    nn.Linear(64, 64),
    nn.LayerNorm(64),
    nn.GELU(),
    nn.Linear(64, 1),
)
for m in model.modules():
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
        nn.init.zeros_(m.bias)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
for step in range(200):
    for group in opt.param_groups:
        group["lr"] = 1e-3 * min(1.0, (step + 1) / 21)
    x = torch.randn(32, 16)
    y = x[:, :4].sum(dim=1, keepdim=True)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
