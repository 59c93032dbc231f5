"""Map character positions of a prompt to token indices (needle depth and needle-score span)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ssmax.data.tokenizer import Tokenizer


def token_finder(
    tokenizer: Tokenizer, ids: Sequence[int]
) -> Callable[[int | np.ndarray], int | np.ndarray]:
    """char -> index of the token that holds the first UTF-8 byte of character ``char`` of
    decode(ids) (byte-level BPE may split a character between tokens). One pass over the
    tokens' bytes, then a bisection per character: no prefix decodes."""
    pieces = tokenizer.token_bytes(ids)
    data = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    first_bytes = np.flatnonzero((data & 0xC0) != 0x80)  # UTF-8 lead bytes: one a character
    ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))

    def find(char: int | np.ndarray) -> int | np.ndarray:  # an array of characters: of each
        index = np.searchsorted(ends, first_bytes[char], side="right")
        return int(index) if np.ndim(index) == 0 else index

    return find
