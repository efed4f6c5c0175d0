# expect: quiet
"""Correct: the same loop training on the batch it draws at every step, noise added to
the input; and a rotation-style task whose labels are one tensor the program builds once
(never yielded by a loader) and gives the loss at every step."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x_all = torch.randn(512, 8)
y_all = (x_all[:, 0] > 0).long() + (x_all[:, 1] > 0).long()
loader = DataLoader(TensorDataset(x_all, y_all), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
head = nn.Linear(16, 4)
opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.05)
rotations = torch.arange(4).repeat(8)  # the pretext task's labels, built once
for epoch in range(3):
    for x, y in loader:
        opt.zero_grad()
        noisy = x + 0.1 * torch.randn_like(x)
        loss = nn.functional.cross_entropy(model(noisy), y)
        features = model[1](model[0](x.roll(1, dims=1)))
        loss = loss + nn.functional.cross_entropy(head(features), rotations)
        loss.backward()
        opt.step()
