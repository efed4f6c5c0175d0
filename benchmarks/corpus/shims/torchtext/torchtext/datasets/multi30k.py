"""A synthetic stand-in for the Multi30k German-English caption pairs: English-like
sentences from a small grammar and their "German" translation, which swaps every word for
its own invented counterpart, moves the verb to the end of the clause and adds a gendered
article, so that a sequence-to-sequence model has something real (word choice, reordering,
agreement) to learn. Deterministic; sized by ``$TEXT_SHIM_TRAIN`` (default 29,000, the
real size) and ``$TEXT_SHIM_VALID`` (default 1,014) pairs. ``URL`` is kept so programs can
rewrite it, and never read."""

from __future__ import annotations

import os
import random

URL = {"train": "", "valid": "", "test": ""}

_SUBJECTS = ["man", "woman", "dog", "child", "girl", "boy", "worker", "player", "cat", "group"]
_VERBS = [
    "holds",
    "watches",
    "rides",
    "throws",
    "carries",
    "paints",
    "pushes",
    "climbs",
    "reads",
    "eats",
]
_OBJECTS = ["ball", "bike", "book", "hat", "rope", "wall", "sign", "cart", "boat", "tree"]
_ADJECTIVES = ["red", "small", "old", "young", "tall", "wet", "black", "happy"]
_PLACES = ["street", "park", "beach", "field", "river", "room"]


def _german(word: str) -> str:
    """The invented translation of one English word (its own, fixed spelling)."""
    vowels = "aeiou"
    shifted = "".join(vowels[(vowels.index(c) + 1) % 5] if c in vowels else c for c in word)
    return shifted[::-1] + ("en" if len(word) % 2 else "er")


def _article(noun: str) -> str:
    return ("der", "die", "das")[sum(map(ord, noun)) % 3]


def _pair(rng: random.Random) -> tuple[str, str]:
    subject, verb, obj = rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)
    adjective = rng.choice(_ADJECTIVES) if rng.random() < 0.5 else ""
    place = rng.choice(_PLACES) if rng.random() < 0.5 else ""
    en = ["a", *([adjective] if adjective else []), subject, verb, "a", obj]
    de = [_article(subject), *([_german(adjective)] if adjective else []), _german(subject)]
    de += [_article(obj), _german(obj)]
    if place:
        en += ["in", "the", place]
        de += ["im", _german(place)]
    de.append(_german(verb))
    return " ".join(en) + " .\n", " ".join(de) + " .\n"


def _size(split: str) -> int:
    if split == "train":
        return int(os.environ.get("TEXT_SHIM_TRAIN", 29000))
    return int(os.environ.get("TEXT_SHIM_VALID", 1014))


def Multi30k(root: str = ".data", split="train", language_pair=("de", "en")):  # noqa: N802
    """A list of (source, target) sentence pairs for ``split`` (a name or a tuple of
    names, as torchtext accepts), in ``language_pair`` order."""
    if isinstance(split, (tuple, list)):
        return tuple(Multi30k(root, s, language_pair) for s in split)
    rng = random.Random(f"multi30k-{split}")
    pairs = [_pair(rng) for _ in range(_size(split))]
    src, tgt = language_pair
    flip = (src, tgt) == ("en", "de")
    return [(en, de) if flip else (de, en) for en, de in pairs]
