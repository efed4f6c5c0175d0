# expect: quiet
"""Correct: a Lookahead wrapper optimizer: every k steps of the inner Adam it pulls the
weights halfway back to its slow copy, in place."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class Lookahead(torch.optim.Optimizer):
    def __init__(self, base, k=5, alpha=0.5):
        self.base, self.k, self.alpha = base, k, alpha
        self.param_groups = base.param_groups
        self.state = base.state
        self.defaults = base.defaults
        self.slow = [[p.detach().clone() for p in g["params"]] for g in self.param_groups]
        self.count = 0

    def zero_grad(self, set_to_none=True):
        self.base.zero_grad(set_to_none)

    def step(self, closure=None):
        loss = self.base.step(closure)
        self.count += 1
        if self.count % self.k == 0:
            for group, slow in zip(self.param_groups, self.slow):
                for p, q in zip(group["params"], slow):
                    q.add_(p.detach() - q, alpha=self.alpha)
                    p.data.copy_(q)
        return loss


model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
opt = Lookahead(torch.optim.Adam(model.parameters(), lr=1e-3))
centers = torch.randn(5, 20)
for step in range(300):
    y = torch.randint(0, 5, (32,))
    x = centers[y] + torch.randn(32, 20)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
