"""The classification-loss tap: the facts read from shapes and arguments only, told once
per change, and the functions restored by the last holder."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from gradwatch.hooks import classloss


def test_facts_of_the_usual_calls() -> None:
    heard: list[classloss.Facts] = []
    originals = {n: getattr(F, n) for n in classloss.TARGETS}
    classloss.install(heard.append)
    try:
        logits, labels = torch.randn(8, 5, requires_grad=True), torch.randint(0, 5, (8,))
        loss = nn.CrossEntropyLoss()(logits, labels)
        assert torch.equal(loss, originals["cross_entropy"](logits, labels))
        F.cross_entropy(logits, labels)  # the same facts: not told again
        nn.CrossEntropyLoss(label_smoothing=0.1)(logits, labels)
        F.cross_entropy(logits, labels, reduction="sum")
        F.cross_entropy(logits, torch.softmax(torch.randn(8, 5), dim=1))
        nn.NLLLoss()(torch.log_softmax(torch.randn(4, 7, 3), dim=1), torch.randint(0, 7, (4, 3)))
        F.cross_entropy(torch.randn(5), torch.tensor(2))  # unbatched: classes on dim 0
        F.cross_entropy(torch.softmax(logits, dim=1), labels)  # probabilities, not logits
        F.cross_entropy(torch.randn(8, 8, requires_grad=True), torch.arange(8))  # in-batch
        F.cross_entropy(torch.randn(8, 7, requires_grad=True), torch.zeros(8, dtype=torch.long))
        with torch.no_grad():
            F.cross_entropy(torch.randn(8, 9), labels)  # evaluation: ignored
    finally:
        classloss.uninstall(heard.append)
    assert heard == [
        (5, 0.0, True, False, False, False),
        (5, 0.1, True, False, False, False),
        (5, 0.0, False, False, False, False),
        (5, 0.0, True, True, False, False),
        (7, 0.0, True, False, False, False),
        (5, 0.0, True, False, False, False),
        (5, 0.0, True, False, True, False),
        (8, 0.0, True, False, False, True),  # a similarity of the batch's 8 rows
        (7, 0.0, True, False, False, True),  # the same without the diagonal (SimCLR)
    ]
    for name, fn in originals.items():
        assert getattr(F, name) is fn
