# expect: clip-before-backward at steps 2-3
"""Bug: gradient clipping called before ``backward()``: it clips the gradients of nothing
(``zero_grad`` set them to None), and an RNN trained at a high SGD rate gets unclipped
updates."""

import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(4, 32, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=2.0)
for step in range(30):
    x = torch.randn(16, 20, 4)
    y = (x[:, :, 0].sum(dim=1) > 0).long() + 2 * (x[:, :, 1].sum(dim=1) > 0).long()
    opt.zero_grad()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG: before backward
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
