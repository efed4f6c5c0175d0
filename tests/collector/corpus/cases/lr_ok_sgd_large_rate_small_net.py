# expect: quiet
"""Correct: plain SGD at 0.5 on a small MNIST-sized MLP (784-128-10, cross-entropy). SGD's
step is the rate times the gradient, so a large rate on a small net is normal; only
optimizers whose step is about the rate itself are judged by lr-too-large."""

import torch
from torch import nn

torch.manual_seed(0)
teacher = torch.randn(784, 10)
model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(150):
    x = torch.rand(64, 784)  # pixel intensities in [0, 1]
    y = ((x - 0.5) @ teacher).argmax(dim=1)
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
