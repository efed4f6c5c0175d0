# expect: quiet
"""Correct: DQN with a target network (as seungeunrho/minimalRL's dqn.py writes it): a
second Qnet, never in an optimizer, copied from the trained one by load_state_dict; its
output feeds the loss without detach, so gradients reach it and are never used. A copy of
the trained model that feeds the same loss is a target network, not a layer cut from the
optimizer."""

import torch
import torch.nn.functional as F
from torch import nn


class Qnet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 32)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


torch.manual_seed(0)
q, q_target = Qnet(), Qnet()
q_target.load_state_dict(q.state_dict())
optimizer = torch.optim.Adam(q.parameters(), lr=1e-3)
for step in range(60):
    s, a = torch.randn(32, 4), torch.randint(0, 2, (32, 1))
    r, s_prime = torch.randn(32, 1), torch.randn(32, 4)
    q_a = q(s).gather(1, a)
    target = r + 0.98 * q_target(s_prime).max(1)[0].unsqueeze(1)  # no detach, as written
    loss = F.smooth_l1_loss(q_a, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 20 == 19:
        q_target.load_state_dict(q.state_dict())
