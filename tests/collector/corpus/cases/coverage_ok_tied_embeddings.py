# expect: quiet
"""Correct: a tiny LSTM language model whose output layer shares the embedding matrix
(weight tying), trained with Adam on a synthetic sequence task."""

import torch
from torch import nn

torch.manual_seed(0)
V, E = 50, 32


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = nn.LSTM(E, E, batch_first=True)
        self.out = nn.Linear(E, V)
        self.out.weight = self.emb.weight

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.out(h)


model = LM()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(300):
    start = torch.randint(0, V, (16, 1))
    seq = (start + torch.arange(21)) % V
    logits = model(seq[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, V), seq[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
