# expect: quiet
"""Correct: stochastic depth: each residual block is skipped with probability 0.5 during
training (its parameters get no gradient on those steps); all blocks run in evaluation."""

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(6))
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            if not self.training or torch.rand(()) > 0.5:
                h = h + b(h)
        return self.out(h)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
w = torch.randn(16, 4)
for step in range(300):
    x = torch.randn(64, 16)
    loss = nn.functional.cross_entropy(model(x), (x @ w).argmax(1))
    opt.zero_grad()
    loss.backward()
    opt.step()
