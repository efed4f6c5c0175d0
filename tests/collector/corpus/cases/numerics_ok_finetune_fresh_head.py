# expect: quiet
"""Correct: fine-tuning — a "pretrained" backbone is frozen while a fresh, zero-initialised
head trains for 100 steps, then the backbone is unfrozen with a 10x smaller learning rate
(its own param group, which held it all along)."""

import torch
from torch import nn

torch.manual_seed(0)
backbone = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
head = nn.Linear(64, 5)
nn.init.zeros_(head.weight)
nn.init.zeros_(head.bias)
model = nn.Sequential(backbone, head)
for p in backbone.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW(
    [{"params": backbone.parameters(), "lr": 1e-4}, {"params": head.parameters(), "lr": 1e-3}]
)
for step in range(250):
    if step == 100:
        for p in backbone.parameters():
            p.requires_grad_(True)
    x = torch.randn(32, 16)
    y = x[:, :5].argmax(dim=1)
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
