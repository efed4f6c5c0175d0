# expect: quiet
"""Correct: meta-learning on sine waves (the shape of JosephKJ/PyTorch-MAML-and-Reptile):
every step fits a new task of random amplitude and phase, and every 100 steps the model
is fine-tuned for 32 steps on one fixed task, where its loss falls far below that of a
fresh task. The loss of the next fresh tasks stands many times that best, for as long as
training goes, while the weights keep their size."""

import math

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
x_fixed = torch.linspace(-5, 5, 50).unsqueeze(1)
y_fixed = 0.3 * torch.sin(x_fixed + 0.5)


def sgd_step(x: torch.Tensor, y: torch.Tensor) -> None:
    model.zero_grad()
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        p.data -= 0.02 * p.grad


for iteration in range(400):
    amplitude, phase = 0.1 + 4.9 * torch.rand(()), 2 * math.pi * torch.rand(())
    x = 10 * torch.rand(10, 1) - 5
    sgd_step(x, amplitude * torch.sin(x + phase))
    if iteration % 100 == 50:
        for _ in range(32):
            sgd_step(x_fixed, y_fixed)
