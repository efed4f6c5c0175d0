# expect: quiet
"""Correct: skip-gram-style sparse embeddings (nn.Embedding(sparse=True)) under SparseAdam
next to a dense head under Adam: each step touches a few rows of a large table; the sparse
gradient is cleared by the optimizer on even steps and set to None by hand on odd ones."""

import torch
from torch import nn

torch.manual_seed(0)
emb = nn.Embedding(1000, 16, sparse=True)
head = nn.Linear(16, 1)
model = nn.ModuleDict({"emb": emb, "head": head})
opt_sparse = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-2)
opt_dense = torch.optim.Adam(head.parameters(), lr=1e-2)
target = torch.randn(1000)
for step in range(300):
    idx = torch.randint(0, 1000, (32,))
    loss = (head(emb(idx)).squeeze(1) - target[idx]).pow(2).mean()
    opt_dense.zero_grad()
    if step % 2:
        emb.weight.grad = None
    else:
        opt_sparse.zero_grad()
    loss.backward()
    opt_sparse.step()
    opt_dense.step()
