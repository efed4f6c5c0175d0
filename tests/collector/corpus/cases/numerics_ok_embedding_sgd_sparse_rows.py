# expect: quiet
"""Correct: a bag-of-words classifier over a 5,000-token embedding with plain SGD: each
step moves only the rows of the tokens in its batch (the whole-matrix update ratio is
tiny; the old 'update-ratio too small' warning fired on exactly this)."""

import torch
from torch import nn

torch.manual_seed(0)
emb = nn.EmbeddingBag(5000, 32, mode="mean")
head = nn.Linear(32, 2)
model = nn.Sequential()
model.add_module("emb", emb)
model.add_module("head", head)
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(200):
    tokens = torch.randint(0, 5000, (16, 12))
    y = (tokens < 2500).float().mean(dim=1).round().long()
    opt.zero_grad()
    nn.functional.cross_entropy(head(emb(tokens)), y).backward()
    opt.step()
