# expect: quiet
"""Correct twin of coverage_bug_head_replaced_after_optimizer: the head is replaced first and
the optimizer built afterwards."""

import torch
from _setup import classification, seeded_mlp, train
from torch import nn

model = seeded_mlp(8, 32, 10)
model[2] = nn.Linear(32, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
train(model, opt, 40, classification(8, 3), "cross_entropy")
