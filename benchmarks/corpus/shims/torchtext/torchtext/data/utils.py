"""``torchtext.data.utils.get_tokenizer``: every tokenizer splits on blanks and peels
punctuation off the words (spaCy and the "basic_english" rule give the same on our
synthetic, space-separated text)."""

from __future__ import annotations

import re
from collections.abc import Callable

_TOKEN = re.compile(r"\w+|[^\w\s]")


def get_tokenizer(tokenizer: object = None, language: str = "en") -> Callable[[str], list[str]]:
    """A tokenizer for ``language``: words and punctuation marks, lower-cased for
    ``basic_english`` as torchtext's is."""
    lower = tokenizer == "basic_english"

    def tokenize(text: str) -> list[str]:
        return _TOKEN.findall(text.lower() if lower else text)

    return tokenize
