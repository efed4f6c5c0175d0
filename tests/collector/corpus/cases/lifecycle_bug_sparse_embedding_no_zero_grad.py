# expect: stale-grad at step 2
"""Bug: sparse embeddings (nn.Embedding(sparse=True) under SparseAdam) whose optimizer is
never cleared: each backward pass adds to the sparse gradient by replacing it (grad + new),
so every step applies the sum of all earlier ones."""

import torch
from torch import nn

torch.manual_seed(0)
emb = nn.Embedding(1000, 16, sparse=True)
head = nn.Linear(16, 1)
model = nn.ModuleDict({"emb": emb, "head": head})
opt_sparse = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-2)
opt_dense = torch.optim.Adam(head.parameters(), lr=1e-2)
for step in range(60):
    idx = torch.randint(0, 1000, (32,))
    loss = head(emb(idx)).pow(2).mean()
    opt_dense.zero_grad()  # the bug: opt_sparse.zero_grad() is missing
    loss.backward()
    opt_sparse.step()
    opt_dense.step()
