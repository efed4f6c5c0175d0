# expect: param-not-in-optimizer at step 1
"""Bug: hidden layers kept in a plain Python list: parameters() does not see them, so the
optimizer never trains them (the twin registers them with nn.ModuleList)."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = [nn.Linear(4, 16), nn.Linear(16, 16)]  # the bug
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
