"""The setup the corpus cases share: a seeded MLP, synthetic regression batches and the
plain training loop (zero_grad, forward, backward, step). Each case keeps only the lines
that make it a bug or its fix; a case that changes the loop itself writes the loop out.

Not a case (``harness.all_cases`` skips files whose name starts with ``_``); a case imports
it as a sibling (``python CASE`` puts the case's folder first on ``sys.path``). Every helper
draws from torch's global generator in the order the inline code it replaced did, so each
case sees the same numbers."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Batch = Callable[[], tuple[torch.Tensor, torch.Tensor]]
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def seeded_mlp(*sizes: int, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """``torch.manual_seed(0)``, then Linear layers of ``sizes`` with ``act`` between them
    (``seeded_mlp(4, 16, 1)`` is ``Sequential(Linear(4, 16), ReLU(), Linear(16, 1))``)."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        if i:
            layers.append(act())
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
    return nn.Sequential(*layers)


def seeded_conv_bn_net(channels: int, blocks: int, classes: int, width: int = 8) -> nn.Sequential:
    """``torch.manual_seed(0)``, then ``blocks`` × (3×3 conv keeping its bias, BatchNorm,
    ReLU) of ``width`` channels from ``channels`` inputs, global average pooling and a
    Linear to ``classes``."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for i in range(blocks):
        layers += [nn.Conv2d(width if i else channels, width, 3, padding=1)]
        layers += [nn.BatchNorm2d(width), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))


def ddp_clamped(constrained: Callable[[int, int], bool], steps: int = 60) -> None:
    """Two-layer tanh MLP under DDP (gloo, one shard per rank), SGD; after the update of
    every step where ``constrained(rank, step)`` holds, the first layer's weight is clamped
    to ±0.1 by hand (an edit outside ``step()``). Run under ``torchrun``."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    for step in range(1, steps + 1):
        x = torch.randn(16, 8, generator=data)
        y = x[:, :2] * 0.5
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if constrained(rank, step):
            with torch.no_grad():
                model.module[0].weight.clamp_(-0.1, 0.1)
    dist.destroy_process_group()


def layernorm_net() -> nn.Sequential:
    """``torch.manual_seed(0)``, then a transformer-style MLP 16-64-64-1 (LayerNorm and GELU
    after each hidden layer, weights drawn with std 0.02, zero biases)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 64),
        nn.LayerNorm(64),
        nn.GELU(),
        nn.Linear(64, 64),
        nn.LayerNorm(64),
        nn.GELU(),
        nn.Linear(64, 1),
    )
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
    return model


def regression(
    features: int = 4, *, inputs: int | None = None, keepdim: bool = True, batch: int = 32
) -> Batch:
    """Batches of ``batch`` normal inputs, the target the sum of the first ``inputs``
    features (all when None), shape ``(batch, 1)`` (``(batch,)`` without ``keepdim``)."""

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch, features)
        return x, x[:, :inputs].sum(dim=1, keepdim=keepdim)

    return draw


def classification(features: int, classes: int, batch: int = 32) -> Batch:
    """Batches of ``batch`` normal inputs, the class the largest of the first ``classes``."""

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch, features)
        return x, x[:, :classes].argmax(dim=1)

    return draw


def freeze_at(module: nn.Module, at: int) -> Callable[[int], None]:
    """A ``before`` callback for :func:`train`: freezes ``module`` (``requires_grad_(False)``)
    at step ``at``."""

    def before(step: int) -> None:
        if step == at:
            module.requires_grad_(False)

    return before


def train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    batch: Batch,
    loss: str | Loss = "mse_loss",
    *,
    clip: float | None = None,
    before: Callable[[int], None] | None = None,
    set_to_none: bool | None = None,
) -> None:
    """``steps`` plain training steps: ``before(step)`` first when given; ``set_to_none``
    passed to ``opt.zero_grad`` when given; ``loss`` a function of (output, target) or the
    name of one in ``torch.nn.functional``; ``clip`` the gradients' largest total norm."""
    for step in range(steps):
        if before is not None:
            before(step)
        x, y = batch()
        if set_to_none is None:
            opt.zero_grad()
        else:
            opt.zero_grad(set_to_none=set_to_none)
        # a name is looked up at every step, as an inline call is: gradwatch wraps the
        # functional losses when it attaches (at the first forward under `gradwatch run`)
        fn = getattr(nn.functional, loss) if isinstance(loss, str) else loss
        fn(model(x), y).backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
