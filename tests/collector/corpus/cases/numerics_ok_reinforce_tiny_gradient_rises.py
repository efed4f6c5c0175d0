# expect: quiet
"""Correct: REINFORCE (pytorch/examples reinforce.py's policy). Early episodes are short and
their normalised returns nearly cancel, so the policy gradient is tiny (~0.003); when the
returns start to differ it rises ~30x (to ~0.08) — still far below the weights' own scale
(‖θ‖ ≈ 7). exploding-grad called it "31x" before; growth is now judged from a floor tied
to ‖θ‖."""

import torch
from torch import nn

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 128), nn.Dropout(0.6), nn.ReLU(), nn.Linear(128, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for episode in range(60):
    states = torch.randn(20, 4)
    dist = torch.distributions.Categorical(logits=policy(states))
    actions = dist.sample()
    spread = 0.003 if episode < 30 else 0.1  # returns nearly equal, then they differ
    returns = spread * torch.randn(20)
    opt.zero_grad()
    (-(dist.log_prob(actions) * returns).mean()).backward()
    opt.step()
