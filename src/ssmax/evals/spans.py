"""Map character positions of a prompt to token indices (needle depth and needle-score span)."""

from __future__ import annotations

from collections.abc import Sequence

from ssmax.data.tokenizer import Tokenizer


def char_to_token(tokenizer: Tokenizer, ids: Sequence[int], char: int) -> int:
    """Index of the token whose decoded text covers character ``char`` of decode(ids).

    Token k covers [len(decode(ids[:k])), len(decode(ids[:k+1]))); the largest k whose prefix
    is no longer than ``char`` is found by bisection (byte-level BPE decodes losslessly, so the
    prefix lengths grow with k). Costs O(log n) decodes, no offsets API needed.
    """
    lo, hi = 0, len(ids) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(tokenizer.decode(ids[:mid])) <= char else (lo, mid - 1)
    return lo
