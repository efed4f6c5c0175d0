# expect: param-not-in-optimizer at step 0
"""Bug: the classifier head is replaced (new number of classes) after the optimizer was built
from model.parameters(): the new head is in no param group and never trains."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
model[2] = nn.Linear(32, 3)  # fine-tune for 3 classes
for step in range(40):
    x = torch.randn(32, 8)
    y = x[:, :3].argmax(dim=1)
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
