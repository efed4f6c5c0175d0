# expect: quiet
"""Top-1 mixture of experts: each token goes to one expert, so an expert the router does not
pick gets no tokens (it does not run, and has no gradient) for several steps. Conditional
computation, not a parameter cut off from the loss (false alarm of param-no-grad before)."""

import torch
from torch import nn

torch.manual_seed(0)


class MoE(nn.Module):
    def __init__(self, d: int = 8, experts: int = 8) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))
        self.out = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.router(x).softmax(-1)
        weight, pick = gate.max(-1)
        h = torch.zeros_like(x)
        for k, expert in enumerate(self.experts):
            routed = pick == k
            if routed.any():  # an expert without tokens does not run
                h[routed] = expert(x[routed]) * weight[routed, None]
        return self.out(h)


model = MoE()
with torch.no_grad():  # a skewed router: most tokens go to a few experts
    model.router.weight.mul_(4.0)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(40):
    x = torch.randn(6, 8)
    y = x.sum(-1, keepdim=True)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
