# expect: quiet
"""Correct: continual learning: a new head per task, appended to the model and given to the
optimizer with add_param_group; the previous head stops receiving gradients when its
task ends."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU())
        self.heads = nn.ModuleList([nn.Linear(64, 2)])

    def forward(self, x, task):
        return self.heads[task](self.body(x))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
centers = torch.randn(2, 20)
for task in range(3):  # continual learning: a new head per task, added to the optimizer
    if task > 0:
        head = nn.Linear(64, 2)
        model.heads.append(head)
        opt.add_param_group({"params": head.parameters()})
    for step in range(150):
        y = torch.randint(0, 2, (32,))
        x = centers[y] + torch.randn(32, 20) + task
        loss = F.cross_entropy(model(x, task), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
