# expect: param-not-in-optimizer at step 1
"""Bug: the model is built again after the optimizer was made (a second `model = Net()`
left over from a refactor): the optimizer holds the first model's parameters, the loop
trains the second, which nothing updates."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 32)
        self.fc2 = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model = Net()  # the bug
for step in range(40):
    x = torch.randn(32, 4)
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
    optimizer.step()
