# expect: quiet
# timeout: 300
"""Correct: a tiny GPT-style transformer (token + position embeddings, pre-LayerNorm
attention blocks, AdamW, warm-up, gradient clipping at 1.0) on a character sequence task,
200 steps for each of 3 seeds. The embedding's rows move only when their tokens appear;
LayerNorm and first-attention gradients grow from a near-zero start while the loss falls."""

import torch
from torch import nn

VOCAB, CTX, D = 32, 16, 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(CTX, D)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


text = torch.tensor([(i * 7 + i // 5) % 20 for i in range(5000)])  # a learnable sequence
for seed in range(3):
    torch.manual_seed(seed)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
    for step in range(200):
        starts = torch.randint(0, len(text) - CTX - 1, (8,))
        x = torch.stack([text[s : s + CTX] for s in starts])
        y = torch.stack([text[s + 1 : s + CTX + 1] for s in starts])
        loss = nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
