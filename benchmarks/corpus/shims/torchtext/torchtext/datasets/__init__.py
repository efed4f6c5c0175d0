"""``torchtext.datasets``: `Multi30k` only (synthetic, see `multi30k`)."""

from torchtext.datasets import multi30k
from torchtext.datasets.multi30k import Multi30k

__all__ = ["Multi30k", "multi30k"]
