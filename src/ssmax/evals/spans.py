"""Map character positions of a prompt to token indices (needle depth and needle-score span)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ssmax.data.tokenizer import Tokenizer


def token_finder(tokenizer: Tokenizer, ids: Sequence[int]) -> Callable[[int], int]:
    """char -> index of the token that holds the first UTF-8 byte of character ``char`` of
    decode(ids) (byte-level BPE may split a character between tokens). One pass over the
    tokens' bytes, then a bisection per character: no prefix decodes."""
    pieces = tokenizer.token_bytes(ids)
    data = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    first_bytes = np.flatnonzero((data & 0xC0) != 0x80)  # UTF-8 lead bytes: one a character
    ends = np.cumsum([len(p) for p in pieces])

    def find(char: int) -> int:
        return int(np.searchsorted(ends, first_bytes[char], side="right"))

    return find
