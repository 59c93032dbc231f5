"""What planted facts are (data.facts): their spec, its checks, and facts drawn as text. The
planter that writes them into token rows is ssmax.data.facts; the tokenizer, which may learn
from them (data.facts.in_tokenizer), reads this module and not that one."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ssmax.config.schema import FactsConfig
from ssmax.data.needle import CITIES, NEEDLE

# The needle's words, which no planted template may contain: the eval's phrasing stays unseen.
NEEDLE_WORDS = ("special", "magic", "number")


@dataclass(frozen=True)
class FactSpec:
    """data.facts as the planter reads it (its keys, defaults and docs:
    ssmax.config.schema.FactsConfig); FactSpec() is planting off."""

    fraction: float = FactsConfig.fraction  # share of training rows that carry facts (0: off)
    facts_per_row: int = FactsConfig.facts_per_row  # facts in a row of the training length
    questions_per_row: int = FactsConfig.questions_per_row  # of them asked, with the answer
    digits: tuple[int, int] = (4, 8)  # value length in digits, uniform in [lo, hi]
    templates: tuple[tuple[str, str], ...] = ()  # (fact, question) with {key} and {value}
    titles: tuple[str, ...] = ()  # keys are "{title} {name}"
    names: tuple[str, ...] = ()
    colon_share: float = FactsConfig.colon_share  # facts written "... is: 48213." (as the needle)
    keys: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(f"{t} {n}" for t in self.titles for n in self.names))


def spec_from_cfg(facts_cfg) -> FactSpec:  # noqa: ANN001 - a DictConfig or dict
    """FactSpec of data.facts (None: planting off); every key is there (the schema's)."""
    if not facts_cfg:
        return FactSpec()
    c = facts_cfg
    spec = FactSpec(
        fraction=float(c["fraction"]),
        facts_per_row=int(c["facts_per_row"]),
        questions_per_row=int(c["questions_per_row"]),
        colon_share=float(c.get("colon_share", 0.0)),  # a config written before the key: 0
        digits=tuple(int(d) for d in c["digits"]),
        templates=tuple((t["fact"], t["question"]) for t in c["templates"]),
        titles=tuple(c["titles"]),
        names=tuple(c["names"]),
    )
    check_spec(spec)
    return spec


def check_spec(spec: FactSpec) -> None:
    """One-line ValueError naming the data.facts key at fault."""
    if not 0.0 <= spec.fraction <= 1.0:
        raise ValueError(f"data.facts.fraction={spec.fraction} must be in [0, 1]")
    if spec.fraction == 0:
        return
    lo, hi = spec.digits
    if not 1 <= lo <= hi:
        raise ValueError(f"data.facts.digits={list(spec.digits)} must be [lo, hi], 1 <= lo <= hi")
    if not 1 <= spec.questions_per_row <= spec.facts_per_row:
        raise ValueError(
            f"data.facts.questions_per_row={spec.questions_per_row} must be in "
            f"[1, facts_per_row={spec.facts_per_row}]"
        )
    if not spec.templates:
        raise ValueError("data.facts.templates is empty: give (fact, question) pairs")
    if len(spec.keys) < spec.facts_per_row:
        raise ValueError(
            f"data.facts: {len(spec.keys)} keys (titles x names) < facts_per_row="
            f"{spec.facts_per_row}"
        )
    for fact, question in spec.templates:
        for text in (fact, question):
            if "{key}" not in text or ("{value}" not in fact):
                raise ValueError(f"data.facts.templates: {text!r} needs {{key}} (fact: {{value}})")
            low = text.lower()
            bad = next((w for w in NEEDLE_WORDS if w in low), None)
            if bad:
                raise ValueError(
                    f"data.facts.templates: {text!r} contains {bad!r}, the eval needle's own "
                    f"phrasing ({NEEDLE!r}); planted facts must not copy it"
                )
    cities = {c.lower() for c in CITIES}
    bad_key = next((k for k in spec.keys if any(w in cities for w in _words(k))), None)
    if bad_key:
        raise ValueError(f"data.facts: key {bad_key!r} names a needle city; pick other names")


def _words(key: str) -> list[str]:
    parts = key.lower().split()
    return parts + [" ".join(parts[i : i + 2]) for i in range(len(parts) - 1)]


def drawn(rng: random.Random, share: float) -> bool:
    """True for that share of draws. Nothing is drawn when the share is 0, so a setting left
    at 0 keeps the stream, and every row, as before the setting existed."""
    return share > 0 and rng.random() < share


def fact_colon(fact: str, colon: bool, field: str = "value") -> str:
    """The template with its {field} after a colon ("... is: 48213."), as the needle writes
    its number; as it is without colon."""
    return fact.replace(f" {{{field}}}", f": {{{field}}}") if colon else fact


def random_value(rng: random.Random, digits: tuple[int, int]) -> str:
    """A number of lo..hi digits, no leading zero."""
    n = rng.randint(*digits)
    return str(rng.randint(10 ** (n - 1) if n > 1 else 0, 10**n - 1))


def fact_texts(spec: FactSpec, count: int, seed: int = 0) -> list[str]:
    """count planted facts as text, each with its question and answer (as a row carries them),
    a hundred to a document: the planted language for the tokenizer's training text."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        key, (fact, question) = rng.choice(spec.keys), rng.choice(spec.templates)
        value = random_value(rng, spec.digits)
        fact = fact_colon(fact, drawn(rng, spec.colon_share))
        lines.append(f"{fact.format(key=key, value=value)} {question.format(key=key)} {value}.")
    return ["\n".join(lines[i : i + 100]) for i in range(0, len(lines), 100)]
