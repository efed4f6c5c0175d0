# expect: param-not-in-optimizer at step 0
"""Bug: the classifier head is replaced (new number of classes) after the optimizer was built
from model.parameters(): the new head is in no param group and never trains."""

import torch
from _setup import classification, seeded_mlp, train
from torch import nn

model = seeded_mlp(8, 32, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
model[2] = nn.Linear(32, 3)  # fine-tune for 3 classes
train(model, opt, 40, classification(8, 3), "cross_entropy")
