# expect: loss-at-chance at steps 300-320
"""Bug: inputs and labels are shuffled with two independent permutations each epoch, so
nothing links an input to its label: a 10-class loss sits at ln 10 = 2.30 for all 320
steps."""

import torch
from torch import nn

torch.manual_seed(0)
centers = torch.randn(10, 16) * 3
y_all = torch.arange(2000) % 10
x_all = centers[y_all] + torch.randn(2000, 16)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
step = 0
while step < 320:
    xs = x_all[torch.randperm(2000)]
    ys = y_all[torch.randperm(2000)]  # BUG: a second permutation for the labels
    for i in range(0, 2000, 50):
        opt.zero_grad()
        loss_fn(model(xs[i : i + 50]), ys[i : i + 50]).backward()
        opt.step()
        step += 1
        if step == 320:
            break
