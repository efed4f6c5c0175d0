# expect: lr-too-large at step 1 role cause
"""Bug: a transformer-style net (weights drawn with std 0.02, LayerNorm, gradients clipped at
1.0) trained by AdamW at 1.0 — the usual 1e-3 with a factor 1000 too many. Clipping hides
the gradient's size and Adam normalises it away, so every weight moves by about 1.0 per
step, 50x its own size: lr-too-large names the rate at the first step."""

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
opt = torch.optim.AdamW(model.parameters(), lr=1e-3 * 1e3, weight_decay=0.1)
for step in range(100):
    x = torch.randn(32, 16)
    y = x[:, :4].sum(dim=1, keepdim=True)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
