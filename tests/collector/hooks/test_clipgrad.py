"""The clipping tap: the functions stay torch's own in what they compute, listeners hear
each clip before and after it, and the last holder restores the functions."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import clip_grad

from gradwatch.hooks import clipgrad


def grads(seed: int = 0) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    params = [nn.Parameter(torch.randn(3, 3)) for _ in range(2)]
    for p in params:
        p.grad = torch.randn(3, 3) * 10
    return params


def test_listeners_hear_each_clip_once_before_and_after_it() -> None:
    heard: list[tuple[str, int, bool]] = []
    originals = {n: getattr(clip_grad, n) for n in (*clipgrad.TARGETS, clipgrad.INNER)}

    def listener(name: str, params: object, done: bool) -> None:
        heard.append((name, len(params), done))  # type: ignore[arg-type]

    clipgrad.install(listener)
    try:
        params, twin = grads(), grads()
        norm = nn.utils.clip_grad_norm_(iter(params), 1.0)  # a one-shot iterator
        expected = originals["clip_grad_norm_"](twin, 1.0)  # bound before: heard, via the helper
        assert torch.equal(norm, expected)
        assert all(torch.equal(a.grad, b.grad) for a, b in zip(params, twin, strict=True))  # type: ignore[arg-type]
        nn.utils.clip_grad_value_(params[0], 0.1)
    finally:
        clipgrad.uninstall(listener)
    assert heard == [
        ("clip_grad_norm_", 2, False),
        ("clip_grad_norm_", 2, True),
        ("clip_grad_norm_", 2, False),
        ("clip_grad_norm_", 2, True),
        ("clip_grad_value_", 1, False),
        ("clip_grad_value_", 1, True),
    ]
    for name, fn in originals.items():
        assert getattr(clip_grad, name) is fn
    assert nn.utils.clip_grad_norm_ is originals["clip_grad_norm_"]
