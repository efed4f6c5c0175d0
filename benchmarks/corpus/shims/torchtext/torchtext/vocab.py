"""``torchtext.vocab``: a `Vocab` (token -> index with a default for unknown tokens) and
`build_vocab_from_iterator`, ordered as torchtext orders it (specials first, then by
falling frequency, ties in first-seen order)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class Vocab:
    """Tokens and their indices; calling it on a list of tokens gives their indices."""

    def __init__(self, tokens: list[str]) -> None:
        self._itos = list(tokens)
        self._stoi = {t: i for i, t in enumerate(self._itos)}
        self._default: int | None = None

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: str) -> bool:
        return token in self._stoi

    def __getitem__(self, token: str) -> int:
        if token in self._stoi:
            return self._stoi[token]
        if self._default is None:
            raise RuntimeError(f"token {token!r} is not in the vocabulary and has no default")
        return self._default

    def __call__(self, tokens: list[str]) -> list[int]:
        return self.lookup_indices(tokens)

    def set_default_index(self, index: int | None) -> None:
        self._default = index

    def get_default_index(self) -> int | None:
        return self._default

    def lookup_indices(self, tokens: list[str]) -> list[int]:
        return [self[t] for t in tokens]

    def lookup_token(self, index: int) -> str:
        return self._itos[index]

    def lookup_tokens(self, indices: list[int]) -> list[str]:
        return [self._itos[int(i)] for i in indices]

    def get_itos(self) -> list[str]:
        return list(self._itos)

    def get_stoi(self) -> dict[str, int]:
        return dict(self._stoi)

    def append_token(self, token: str) -> None:
        if token not in self._stoi:
            self._stoi[token] = len(self._itos)
            self._itos.append(token)


def build_vocab_from_iterator(
    iterator: Iterable[list[str]],
    min_freq: int = 1,
    specials: list[str] | None = None,
    special_first: bool = True,
    max_tokens: int | None = None,
) -> Vocab:
    """The vocabulary of every token seen at least ``min_freq`` times."""
    counts: Counter[str] = Counter()
    for tokens in iterator:
        counts.update(tokens)
    specials = list(specials or [])
    ordered = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: first seen wins ties
    words = [t for t, c in ordered if c >= min_freq and t not in specials]
    if max_tokens is not None:
        words = words[: max(max_tokens - len(specials), 0)]
    return Vocab(specials + words if special_first else words + specials)
