# expect: quiet
"""Correct: feature extraction. A frozen convolutional backbone with parameter-free batch
norm and dropout is kept in eval() (running statistics, no dropout) while the linear head
after it trains; the model is one flat nn.Sequential, so the norm layer's parent holds the
trainable head. The eval() layers come before every trainable parameter: no gradient that
trains anything passes through them (no eval-mode-training)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3),
    nn.BatchNorm2d(8, affine=False),
    nn.ReLU(),
    nn.Dropout(0.2),
    nn.Flatten(),
    nn.Linear(8 * 6 * 6, 10),
)
for p in model[0].parameters():
    p.requires_grad_(False)
for i in range(4):
    model[i].eval()  # the backbone uses its running statistics and no dropout
opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
for step in range(60):
    x = torch.randn(16, 1, 8, 8)
    y = torch.randint(0, 10, (16,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
