# expect: param-no-grad at step 3
"""A branch runs in every forward, but its output is detached before it joins the loss: its
module runs and it never gets a gradient — cut off from the loss."""

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 1)
        self.b = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x) + self.b(x).detach()


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(10):
    x = torch.randn(16, 8)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x.sum(-1, keepdim=True)).backward()
    opt.step()
