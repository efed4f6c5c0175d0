# expect: quiet
"""Correct: 3 classes in proportions 80/15/5 and features that carry little signal; the
loss settles at the entropy of the label prior (about 0.61), well below ln 3 = 1.10, for
all 320 steps."""

import torch
from torch import nn

torch.manual_seed(0)
y_all = torch.multinomial(torch.tensor([0.8, 0.15, 0.05]), 4000, replacement=True)
x_all = torch.randn(4000, 16)
x_all[:, 0] += 0.1 * y_all  # a faint signal
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step = 0
while step < 320:
    order = torch.randperm(4000)
    for i in range(0, 4000, 50):
        idx = order[i : i + 50]
        opt.zero_grad()
        nn.functional.cross_entropy(model(x_all[idx]), y_all[idx]).backward()
        opt.step()
        step += 1
        if step == 320:
            break
