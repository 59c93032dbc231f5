"""Planted facts: key-value retrieval written into the pretraining language (data.facts).

At CPU scale induction heads do not form from prose alone, so the needle test would measure
nothing at any length. With ``data.facts.fraction > 0`` that share of training rows carries
facts inside its prose and, later in the same row, a question about one of them with its
answer:

    ... said Elinor. The secret code of Captain Harwood is 48213. She went ... What is the
    secret code of Captain Harwood? 48213. ...

so the skill the needle test probes (find a key earlier in the context, copy the value after
it) exists at the training length, and the long contexts decide whether it survives. The
evaluation needle stays the paper's ("The special magic {city} number is: {digits}."): no
template here says "special magic", no key is a city, and ``check_spec`` refuses any that
would copy the needle. Pieces are inserted before word-start tokens (a token that begins with
a space), so the row tokenizes as its text would; the row is then cut back to its length.
Everything is drawn from a ``random.Random`` the caller seeds: the same row, seed and epoch
give the same tokens.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ssmax.data.fact_spec import FactSpec, check_spec, drawn, fact_colon, random_value
from ssmax.data.tokenizer import Tokenizer


@dataclass
class Planted:
    """One planted fact: its key and value and where they ended up (token indices)."""

    key: str
    value: str
    fact_at: int  # first token of the fact sentence
    answer: tuple[int, int] | None  # tokens [a, b) of " {value}" after its question, if asked


def word_starts(tokenizer: Tokenizer) -> list[bool]:
    """For each token id: does its text begin with a space (a word start)?"""
    return [tokenizer.decode([i]).startswith(" ") for i in range(tokenizer.vocab_size)]


class FactPlanter:
    """Plants facts into token rows. Build once per tokenizer and spec; call per row."""

    def __init__(self, spec: FactSpec, tokenizer: Tokenizer) -> None:
        check_spec(spec)
        self.spec, self.tokenizer = spec, tokenizer
        self.starts = word_starts(tokenizer)
        self.vocab_size = tokenizer.vocab_size

    def check_fits(self, length: int) -> None:
        """Refuse, in one line, a row length that the longest facts and questions overflow."""
        key = max(self.spec.keys, key=lambda k: len(self.tokenizer.encode(" " + k)))
        value = "9" * self.spec.digits[1]
        longest = max(  # with colon_share, also the form with a colon (a token more or none)
            len(self.tokenizer.encode(f" {fact_colon(fact, c).format(key=key, value=value)}"))
            + len(self.tokenizer.encode(f" {question.format(key=key)} {value}."))
            for fact, question in self.spec.templates
            for c in {False, self.spec.colon_share > 0}
        )
        need = longest * self.spec.facts_per_row
        if need >= length:
            raise ValueError(
                f"data.facts: {self.spec.facts_per_row} fact(s) with question take up to {need} "
                f"tokens, more than a row of data.seq_len + 1 = {length}; shorten the templates "
                "or values, or raise data.seq_len"
            )

    def pieces(self, rng: random.Random, n_facts: int, n_questions: int):  # noqa: ANN201
        """[(fact ids, question ids or None, answer span in them, value, key)], distinct keys."""
        keys = rng.sample(self.spec.keys, n_facts)
        out = []
        for i, key in enumerate(keys):
            fact, question = rng.choice(self.spec.templates)
            value = random_value(rng, self.spec.digits)
            fact = fact_colon(fact, drawn(rng, self.spec.colon_share))
            f_ids = self.tokenizer.encode(" " + fact.format(key=key, value=value))
            q_ids, answer = None, None
            if i < n_questions:  # encoded in pieces so the answer's tokens are known
                enc = self.tokenizer.encode
                ask, answer = enc(" " + question.format(key=key)), enc(" " + value)
                q_ids = ask + answer + enc(".")
                answer = (len(ask), len(ask) + len(answer))
            out.append((f_ids, q_ids, answer, value, key))
        return out

    def plant(
        self, row: Sequence[int], rng: random.Random, n_facts: int | None = None
    ) -> tuple[list[int], list[Planted]]:
        """The row with facts and questions inserted at word starts, cut to its own length.

        n_facts (default: facts_per_row scaled to the row's length, at least one per
        training-length row) sets how many facts; questions keep the spec's ratio.
        """
        spec, length = self.spec, len(row)
        n_facts = n_facts or spec.facts_per_row
        n_q = max(1, round(n_facts * spec.questions_per_row / spec.facts_per_row))
        pieces = self.pieces(rng, n_facts, n_q)
        inserted = sum(len(f) + len(q or ()) for f, q, *_ in pieces)
        room = length - inserted  # prose tokens kept
        if room < 1:
            raise ValueError(f"data.facts: {n_facts} facts need more than a row of {length}")
        slots = [i for i in range(room) if self._starts_word(row[i])] or [0]
        events = []  # (prose position, order, ids, fact index, is question)
        for k, (f_ids, q_ids, *_) in enumerate(pieces):
            a = rng.choice(slots)
            events.append((a, 2 * k, f_ids, k, False))
            if q_ids is not None:  # the question goes strictly after its fact
                later = slots[bisect.bisect_right(slots, a) :]
                b = rng.choice(later) if later else room
                events.append((b, 2 * k + 1, q_ids, k, True))
        events.sort(key=lambda e: (e[0], e[1]))
        out: list[int] = []
        found: dict[int, list[int | None]] = {k: [None, None] for k in range(len(pieces))}
        prev = 0
        for pos, _, ids, k, is_q in events:
            out.extend(row[prev:pos])
            prev = pos
            found[k][is_q] = len(out)
            out.extend(ids)
        out.extend(row[prev:room])
        planted = []
        for k, (_, _, span, value, key) in enumerate(pieces):
            f_at, q_at = found[k]
            answer = None if span is None else (q_at + span[0], q_at + span[1])
            planted.append(Planted(key, value, f_at, answer))
        return out[:length], planted

    def _starts_word(self, token: int) -> bool:
        return 0 <= token < self.vocab_size and self.starts[token]
