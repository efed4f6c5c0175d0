# expect: quiet
"""Correct: a fine-tune keeps its BatchNorm layers in eval() on purpose (frozen running
statistics) while the whole model, which has no dropout, trains. The model is in train();
only normalisation layers are in eval (false alarm "dropout is off" of eval-mode-training
before: now info, named as a fine-tuning choice)."""

import torch
from _setup import seeded_conv_bn_net
from torch import nn

model = seeded_conv_bn_net(channels=3, blocks=2, classes=5)
model.train()
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.eval()  # keep the pretrained statistics
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step in range(30):
    x = torch.randn(8, 3, 8, 8)
    y = torch.randint(0, 5, (8,))
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
