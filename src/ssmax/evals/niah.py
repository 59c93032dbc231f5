"""Needle in a haystack (Sec. 3.3, Fig. 6).

The paper hides "The special magic {city} number is: {7 digits}." at depths 10/30/50/70/90% of
contexts up to ~10x the training length, asks for the number in the SFT prompt format, decodes
greedily (most probable non-EOS token each step) and scores the full number and its first digit.
Choices where the paper is silent:

- Context size counts every token the model holds: the prompt plus ``answer_tokens`` decoded
  tokens, so the prompt is exactly ``context_tokens - answer_tokens`` tokens long (a haystack cut
  at the right character makes it fit exactly).
- Haystack: test-split documents (``test_texts``) joined by blank lines, consumed in a seeded
  order, fresh text for each sample. The needle goes at a sentence boundary within ``snap`` (a
  fraction of the haystack) of the requested depth, else at the nearest whitespace. Depth is
  measured in haystack tokens before the needle / haystack tokens (``NeedleSample.needle_depth``).
- ``answer_tokens = 8``: " " + 7 digits is 8 bytes, so any byte-level BPE emits it in <= 8 tokens.
- Scoring on decoded characters: the first run of digits in the answer is the reply; "full" if it
  equals the number, "first_digit" if only its first digit is right, else "wrong" (no digits too).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from ssmax.data.lm import test_texts
from ssmax.data.sft import DEFAULT_PROMPT, prompt_ids
from ssmax.data.tokenizer import Tokenizer
from ssmax.evals.common import model_device
from ssmax.evals.spans import char_to_token
from ssmax.model import Transformer

NEEDLE = "The special magic {city} number is: {number}."
QUESTION = "What is the special magic {city} number?"
DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
ANSWER_TOKENS = 8
SCORES = ("full", "first_digit", "wrong")
CITIES = (
    "Tokyo", "Delhi", "Shanghai", "Sao Paulo", "Mexico City", "Cairo", "Mumbai", "Beijing",
    "Dhaka", "Osaka", "New York", "Karachi", "Buenos Aires", "Chongqing", "Istanbul", "Kolkata",
    "Manila", "Lagos", "Rio de Janeiro", "Tianjin", "Kinshasa", "Guangzhou", "Los Angeles",
    "Moscow", "Shenzhen", "Lahore", "Bangalore", "Paris", "Bogota", "Jakarta", "Chennai", "Lima",
    "Bangkok", "Seoul", "Nagoya", "Hyderabad", "London", "Tehran", "Chicago", "Chengdu", "Nanjing",
    "Wuhan", "Ho Chi Minh City", "Luanda", "Ahmedabad", "Kuala Lumpur", "Hong Kong", "Hangzhou",
    "Riyadh", "Santiago", "Madrid", "Baghdad", "Toronto", "Surat", "Pune", "Houston", "Dallas",
    "Khartoum", "Singapore", "Barcelona", "Saint Petersburg", "Philadelphia", "Atlanta",
    "Yangon", "Alexandria", "Abidjan", "Guadalajara", "Ankara", "Melbourne", "Sydney", "Miami",
    "Nairobi", "Johannesburg", "Cape Town", "Berlin", "Rome", "Athens", "Lisbon", "Vienna",
    "Warsaw", "Prague", "Budapest", "Stockholm", "Oslo", "Copenhagen", "Helsinki", "Dublin",
    "Amsterdam", "Brussels", "Zurich", "Montreal", "Vancouver", "Boston", "Seattle", "Havana",
    "Casablanca", "Accra", "Addis Ababa", "Dubai", "Auckland",
)  # fmt: skip


@dataclass
class NeedleSample:
    ids: list[int]  # the prompt
    city: str
    number: str
    depth: float  # requested
    needle_depth: float  # actual: haystack tokens before the needle / haystack tokens
    needle_start: int  # token index of the needle's first token
    span: tuple[int, int]  # tokens [a, b) from just after the colon to the needle's end


@dataclass
class NeedleRecord:
    context: int
    depth: float
    city: str
    number: str
    answer: str
    score: str
    needle_depth: float


def random_needle(rng: random.Random) -> tuple[str, str]:
    """A random city and a 7-digit number with a non-zero first digit."""
    return rng.choice(CITIES), str(rng.randint(1_000_000, 9_999_999))


def take_haystack(texts: Iterator[str], tokenizer: Tokenizer, n_tokens: int) -> str:
    """The next documents of ``texts``, joined by blank lines, with at least n_tokens tokens."""
    parts, count = [], 0
    while count < n_tokens:
        parts.append(next(texts))
        count += len(tokenizer.encode(parts[-1])) + 1
    return "\n\n".join(parts)


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


def _fit_tail(
    encode: Callable[[str], list[int]], before: str, needle: str, after: str, n_prompt: int
) -> int | None:
    """Tail length c (characters of ``after``) giving exactly n_prompt tokens, else None."""

    def size(c: int) -> int:
        return len(encode(_context(before, needle, after, c)))

    if size(0) > n_prompt:
        return None
    lo, hi = 0, len(after)  # largest c with size(c) <= n_prompt
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if size(mid) <= n_prompt else (lo, mid - 1)
    # token counts are not strictly monotone in c: look just past lo for an exact fit
    return next((c for c in range(lo, min(lo + 64, len(after) + 1)) if size(c) == n_prompt), None)


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

    budget = n_prompt - len(encode(needle))  # haystack tokens to add
    hay_ids = tokenizer.encode(haystack)
    if budget < 1 or len(hay_ids) < budget + 16:
        raise ValueError(f"context_tokens={context_tokens}: haystack budget {budget} tokens")
    head = len(tokenizer.decode(hay_ids[: round(depth * budget)]))
    fits = len(tokenizer.decode(hay_ids[:budget]))  # characters of haystack that fit
    point = _insertion_point(haystack, head, round(snap * fits), fits)
    before, after = haystack[:point], haystack[point:]
    for _ in range(16):
        c = _fit_tail(encode, before, needle, after, n_prompt)
        if c is not None:
            break
        # No tail length hits n_prompt exactly (BPE counts can jump by 2): drop a leading word
        if before:
            before = before[_word_end(before) :]
        else:
            after = after[_word_end(after) :]
    else:
        raise ValueError(f"no haystack cut gives exactly {n_prompt} prompt tokens")
    ctx = _context(before, needle, after, c)
    ids = encode(ctx)
    text = template.format(context=ctx, question=question)
    c0 = text.find(ctx)
    n0 = c0 + len(before)  # needle's first character
    at = [char_to_token(tokenizer, ids, x) for x in (c0, n0, n0 + needle.index(":") + 1)]
    end = char_to_token(tokenizer, ids, n0 + len(needle) - 1) + 1
    ctx_end = char_to_token(tokenizer, ids, c0 + len(ctx) - 1) + 1
    hay_tokens = ctx_end - at[0] - (end - at[1])
    return NeedleSample(
        ids, city, number, depth, (at[1] - at[0]) / max(hay_tokens, 1), at[1], (at[2], end)
    )


@torch.no_grad()
def greedy_decode(
    model: Transformer, prompt: Sequence[int], max_new_tokens: int, eos_id: int
) -> list[int]:
    """Greedy tokens after the prompt, never EOS: one prefill, then one token at a time."""
    model.eval()
    cache = model.new_cache(1, len(prompt) + max_new_tokens)
    ids = torch.tensor([list(prompt)], device=model_device(model))
    hidden = model.hidden(ids, cache)[:, -1]
    out: list[int] = []
    for step in range(max_new_tokens):
        logits = model.lm_head(hidden).float()
        logits[:, eos_id] = float("-inf")  # Sec. 3.3: the most probable non-EOS token
        token = logits.argmax(-1, keepdim=True)
        out.append(int(token))
        if step + 1 < max_new_tokens:
            hidden = model.hidden(token, cache)[:, -1]
    return out


def score_answer(answer: str, number: str) -> str:
    """ "full", "first_digit" or "wrong", from the first run of digits in the decoded answer."""
    match = re.search(r"\d+", answer)
    if match is None:
        return "wrong"
    if match.group() == number:
        return "full"
    return "first_digit" if match.group()[0] == number[0] else "wrong"


def run_niah(
    model: Transformer,
    tokenizer: Tokenizer,
    data_cfg: DictConfig,
    context_sizes: Sequence[int],
    depths: Sequence[float] = DEPTHS,
    samples_per_cell: int = 10,
    seed: int = 0,
    answer_tokens: int = ANSWER_TOKENS,
) -> list[NeedleRecord]:
    """One record per (context size, depth, sample); run under ``scaled_rope_theta`` for Fig. 6."""
    rng, texts = random.Random(seed), test_texts(data_cfg, seed=seed)
    template = data_cfg.get("sft_prompt", DEFAULT_PROMPT)
    records = []
    for context in context_sizes:
        for depth in depths:
            for _ in range(samples_per_cell):
                city, number = random_needle(rng)
                hay = take_haystack(texts, tokenizer, context)
                s = build_sample(
                    tokenizer, hay, city, number, context, depth, answer_tokens, template
                )
                answer = tokenizer.decode(
                    greedy_decode(model, s.ids, answer_tokens, tokenizer.eos_id)
                )
                score = score_answer(answer, number)
                records.append(
                    NeedleRecord(context, depth, city, number, answer, score, s.needle_depth)
                )
    return records


def accuracy_grid(
    records: Sequence[NeedleRecord], level: str = "full"
) -> tuple[list[int], list[float], torch.Tensor]:
    """(contexts, depths, accuracy [C, D]); level "first_digit" also counts full answers."""
    ok = {"full": ("full",), "first_digit": ("full", "first_digit")}[level]
    contexts = sorted({r.context for r in records})
    depths = sorted({r.depth for r in records})
    hits = torch.zeros(len(contexts), len(depths), dtype=torch.float64)
    total = torch.zeros_like(hits)
    for r in records:
        i, j = contexts.index(r.context), depths.index(r.depth)
        total[i, j] += 1
        hits[i, j] += r.score in ok
    return contexts, depths, hits / total
