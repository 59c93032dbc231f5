"""Needle-in-a-haystack prompts (Sec. 3.3): the needle, the haystack, an exact-length prompt.

The paper's needle is "The special magic {city} number is: {7 digits}." (after Arize AI's
test), asked for in the SFT prompt format. Choices where the paper is silent:

- Context size counts every token the model holds: the prompt plus ``answer_tokens`` decoded
  tokens, so the prompt is exactly ``context_tokens - answer_tokens`` tokens long. The haystack
  is cut at the character that makes it fit exactly (BPE counts can jump by two at a word
  start; then a leading word of the haystack is dropped and the cut searched again).
- Haystack: test-split documents (``test_texts``) joined by blank lines, consumed in a seeded
  order, fresh text for each sample. The needle goes at a sentence start within ``snap`` (a
  fraction of the haystack) of the requested depth, else at the nearest word start. Depth is
  haystack tokens before the needle / haystack tokens (``NeedleSample.needle_depth``).
- Cities: 100 distinct world cities (ssmax.data.needle); numbers uniform over 7 digits, first
  digit non-zero.
"""

from __future__ import annotations

import bisect
import random
import re
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
import regex

from ssmax.data.needle import CITIES, NEEDLE, QUESTION
from ssmax.data.sft_batches import DEFAULT_PROMPT, prompt_ids, prompt_text
from ssmax.data.tokenizer import Tokenizer
from ssmax.evals.spans import token_finder

ANSWER_TOKENS = 8  # " " + 7 digits is 8 bytes: <= 8 tokens under any byte-level BPE
SPLIT = "\x00"  # marks where the tail goes in the prompt text (no prompt holds a NUL)
# encoded_prefix's first guess of the characters a token takes: a little over English prose's
# (4.4 with GPT-2's BPE, 4.6 with the embedded BPE on the embedded text), so one encode suffices
CHARS_PER_TOKEN = 5
BETWEEN_LETTERS = regex.compile(r"(?<=\p{L}) (?=\p{L})")  # \p{L}: str.isalpha's categories


@dataclass
class NeedleSample:
    ids: list[int]  # the prompt
    city: str
    number: str
    depth: float  # requested
    needle_depth: float  # actual: haystack tokens before the needle / haystack tokens
    needle_start: int  # token index of the needle's first token
    span: tuple[int, int]  # tokens [a, b) from just after the colon to the needle's end


def random_needle(rng: random.Random) -> tuple[str, str]:
    """A random city and a 7-digit number with a non-zero first digit."""
    return rng.choice(CITIES), str(rng.randint(1_000_000, 9_999_999))


def take_haystack(texts: Iterator[str], tokenizer: Tokenizer, n_tokens: int) -> str:
    """The next documents of ``texts``, joined by blank lines, with at least n_tokens tokens."""
    return take_counted(((t, len(tokenizer.encode(t))) for t in texts), n_tokens)


def take_counted(docs: Iterator[tuple[str, int]], n_tokens: int) -> str:
    """take_haystack from (document, its token count) pairs: takes no document it does not use."""
    parts, count = [], 0
    while count < n_tokens:
        text, tokens = next(docs)
        parts.append(text)
        count += tokens + 1
    return "\n\n".join(parts)


def counted_ahead(
    texts: Iterator[str], tokenizer: Tokenizer, pool: Executor, ahead: int = 64,
    cap: int | None = None,
) -> Iterator[tuple[str, int]]:  # fmt: skip
    """(document, its token count) in the order of ``texts``, the counts taken ``ahead``
    documents in advance by ``pool`` (threads or processes): take_counted's input.
    cap: a document with more tokens is counted as far as a cut past cap (encoded_prefix): a
    count >= cap, which take_counted treats as the whole count for any n_tokens <= cap."""
    pending: deque[tuple[str, Future[int]]] = deque()
    for text in texts:
        pending.append((text, pool.submit(count_tokens, tokenizer, text, cap)))
        if len(pending) > ahead:
            done, tokens = pending.popleft()
            yield done, tokens.result()
    for done, tokens in pending:
        yield done, tokens.result()


def count_tokens(tokenizer: Tokenizer, text: str, cap: int | None = None) -> int:
    """The tokens of text, or, past ``cap``, a count >= cap (counted_ahead's)."""
    if cap is None:
        return len(tokenizer.encode(text))
    return len(encoded_prefix(tokenizer, text, cap, CHARS_PER_TOKEN * cap)[1])


def _insertion_point(haystack: str, target: int, tolerance: int, limit: int) -> int:
    """Character index (<= limit) to insert at: a sentence start near target, else a word start."""

    def nearest(pattern: str) -> int:
        starts = [0, *(m.end() for m in re.finditer(pattern, haystack[:limit]))]
        return min(starts, key=lambda i: abs(i - target))

    best = nearest(r"[.!?][\"')\]]*\s+")
    return best if abs(best - target) <= tolerance else nearest(r"\s+")


def _context(before: str, needle: str, after: str, c: int) -> str:
    return before + needle + (" " + after[:c] if c else "")


def _word_end(text: str) -> int:
    match = re.search(r"\S+\s*", text)
    return match.end() if match else len(text)


def word_cuts(text: str, spacing: int = 1) -> list[int]:
    """Indices of the single spaces between two letters: there the GPT-2 pre-tokenizer (tiktoken's
    gpt2 and the embedded BPE's ByteLevel regex alike) ends one piece and starts the next
    (" ?\\p{L}+" keeps the space with the next word), and BPE never merges across pieces, so
    the token count of a text is the sum of its parts' counts cut there. spacing > 1: only
    the first cut at least ``spacing`` characters after the one before (a search per cut)."""
    cuts, pos = [], 0
    while match := BETWEEN_LETTERS.search(text, pos):
        cuts.append(match.start())
        pos = match.start() + spacing
    return cuts


def encoded_prefix(
    tokenizer: Tokenizer, text: str, tokens: int, chars: int
) -> tuple[int, list[int]]:
    """(h, ids of text[:h]) with at least ``tokens`` ids, or (len(text), all of them) when the
    text has fewer. h is a cut between words (word_cuts), where text[:h] encodes as the start of
    the whole text does: the first cut after ``chars``, then half as far again each time."""
    while chars < len(text) and (cut := BETWEEN_LETTERS.search(text, chars)):
        ids = tokenizer.encode(text[: cut.start()])
        if len(ids) >= tokens:
            return cut.start(), ids
        chars = cut.start() + max(cut.start() // 2, 64)
    return len(text), tokenizer.encode(text)


class CutPrompts:
    """text[:end] + post for any ``end``: its token count and ids, each from one short encode.

    ``text`` is encoded once; at each of word_cuts(text, spacing) a token starts (their
    additivity), so the tokens before it are those of that encoding. text[:end] + post is then
    the tokens before the last cut inside text[:end] (a letter after it) and an encode of the
    rest and post (a few dozen words); no cut inside: the whole, encoded. Equal to encoding the
    whole text (tests/test_evals_niah.py checks it against full encodes). Few encode calls:
    each releases and retakes the GIL, and many short ones stall the prompt builders' threads.

    ``cap``: only text[:horizon] is encoded, up to a cut with more than cap tokens before it
    (encoded_prefix from ``chars`` on), so a prompt that reaches past it has more than cap
    tokens, and count(end, cap) says so without encoding it. A haystack is cut at a few
    thousand tokens of a document that may hold far more."""

    def __init__(
        self, tokenizer: Tokenizer, text: str, post: str, spacing: int = 160,
        cap: int | None = None, chars: int = 0,
    ) -> None:  # fmt: skip
        self.encode, self.text, self.post = tokenizer.encode, text, post
        self.horizon, self.whole = len(text), []
        if cap is not None:
            self.horizon, self.whole = encoded_prefix(tokenizer, text, cap + 1, chars)
        self.cuts = word_cuts(text[: self.horizon], spacing)  # those of text before the horizon
        self.before = []
        if self.cuts:  # the token that starts at a cut: its index is the tokens before it
            self.whole = self.whole or tokenizer.encode(text)
            self.before = token_finder(tokenizer, self.whole)(np.array(self.cuts)).tolist()

    def _rest(self, end: int) -> tuple[int, list[int]]:
        """(tokens of text's encoding kept, the ids of the rest and post)."""
        k = bisect.bisect_left(self.cuts, end - 1) - 1  # the last cut with a letter after it
        kept, start = (self.before[k], self.cuts[k]) if k >= 0 else (0, 0)
        return kept, self.encode(self.text[start:end] + self.post)

    def count(self, end: int, cap: int | None = None) -> int:
        """The token count, or cap + 1 where it is known to be more than ``cap``."""
        if cap is not None and end > self.horizon + 1 and len(self.whole) > cap:
            return cap + 1  # the tokens before the horizon's cut, and at least one after it
        kept, rest = self._rest(end)
        return kept + len(rest)

    def ids(self, end: int) -> list[int]:
        kept, rest = self._rest(end)
        return self.whole[:kept] + rest


def _fit_tail(
    tokenizer: Tokenizer, text: Callable[[str], str], before: str, needle: str, after: str,
    n_prompt: int, tail_chars: int,
) -> tuple[int, list[int]] | None:  # fmt: skip
    """(c, ids): the tail length c (characters of ``after``) whose prompt text(context) is
    exactly n_prompt tokens, context = before + needle (+ " " + after[:c] when c > 0), and the
    prompt's ids; else None. tail_chars: about the characters of ``after`` that fit."""
    head, post = text(before + needle + " " + SPLIT).split(SPLIT)
    n = n_prompt
    prompts = CutPrompts(tokenizer, head + after, post, cap=n, chars=len(head) + tail_chars)
    short = len(head) - 1  # the prompt without a tail (nor the space before it)
    short_count = prompts.count(short, n)
    if short_count > n:
        return None
    lo, hi = 0, len(after)  # largest c with a prompt of <= n tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if prompts.count(len(head) + mid, n) <= n else (lo, mid - 1)
    # token counts are not strictly monotone in c: look just past lo for an exact fit
    if lo == 0 and short_count == n:
        return 0, prompts.ids(short)
    ends = range(len(head) + max(lo, 1), len(head) + min(lo + 64, len(after) + 1))
    end = next((e for e in ends if prompts.count(e, n) == n), None)
    return None if end is None else (end - len(head), prompts.ids(end))


def build_sample(
    tokenizer: Tokenizer,
    haystack: str,
    city: str,
    number: str,
    context_tokens: int,
    depth: float,
    answer_tokens: int = ANSWER_TOKENS,
    template: str = DEFAULT_PROMPT,
    snap: float = 0.025,
) -> NeedleSample:
    """A prompt of exactly ``context_tokens - answer_tokens`` tokens with the needle at depth."""
    needle, question = NEEDLE.format(city=city, number=number), QUESTION.format(city=city)
    n_prompt = context_tokens - answer_tokens

    def encode(context: str) -> list[int]:
        return prompt_ids(tokenizer, context, question, template)

    def text(context: str) -> str:
        return prompt_text(context, question, template)

    budget = n_prompt - len(encode(needle))  # haystack tokens to add
    # the haystack's first budget + 16 tokens (its last document may hold far more)
    _, hay_ids = encoded_prefix(tokenizer, haystack, budget + 16, CHARS_PER_TOKEN * (budget + 16))
    if budget < 1 or len(hay_ids) < budget + 16:
        raise ValueError(f"context_tokens={context_tokens}: haystack budget {budget} tokens")
    head = len(tokenizer.decode(hay_ids[: round(depth * budget)]))
    fits = len(tokenizer.decode(hay_ids[:budget]))  # characters of haystack that fit
    point = _insertion_point(haystack, head, round(snap * fits), fits)
    before, after = haystack[:point], haystack[point:]
    tail_chars = fits - point + 256 + fits // 32  # the prompt's end is about there: a margin
    for _ in range(16):
        fit = _fit_tail(tokenizer, text, before, needle, after, n_prompt, tail_chars)
        if fit is not None:
            break
        # No tail length hits n_prompt exactly (BPE counts can jump by 2): drop a leading word
        if before:
            before = before[_word_end(before) :]
        else:
            after = after[_word_end(after) :]
    else:
        raise ValueError(f"no haystack cut gives exactly {n_prompt} prompt tokens")
    c, ids = fit
    ctx = _context(before, needle, after, c)
    text = template.format(context=ctx, question=question)
    c0 = text.find(ctx)
    n0 = c0 + len(before)  # needle's first character
    token_at = token_finder(tokenizer, ids)
    at = [token_at(x) for x in (c0, n0, n0 + needle.index(":") + 1)]
    end = token_at(n0 + len(needle) - 1) + 1
    ctx_end = token_at(c0 + len(ctx) - 1) + 1
    hay_tokens = ctx_end - at[0] - (end - at[1])
    return NeedleSample(
        ids, city, number, depth, (at[1] - at[0]) / max(hay_tokens, 1), at[1], (at[2], end)
    )
