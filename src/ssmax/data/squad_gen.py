"""A SQuAD-2.0-format QA set generated from the embedded corpus (seeded, deterministic).

Each context is a real passage of the corpus's train split with a made-up fact sentence inserted
at a random depth (sometimes a distractor fact too); the question asks for a span of that fact,
often a number of 1-12 digits. This teaches "read, then copy the answer span" for the needle
test, whose template ("The special magic {city} number is: {7 digits}.") never appears here:
no cities, no 7-digit numbers, no "special magic". Some items are unanswerable (SQuAD 2.0 style,
empty answers); the paper's filter removes them.
"""

from __future__ import annotations

import random
import re

from omegaconf import DictConfig

from ssmax.data.corpus import load_embedded, split_of
from ssmax.data.fact_spec import drawn, fact_colon, spec_from_cfg
from ssmax.data.squad_schema import squad_features

NAMES = [
    "Mr. Ashby", "Mrs. Bertram", "Miss Carrow", "Captain Dunmore", "Lady Ellison",
    "Sir Walter Fane", "Mr. Gresley", "Mrs. Holloway", "Miss Ingram", "Colonel Jessop",
    "Mr. Kendal", "Lady Lovell", "Dr. Marsham", "Miss Norcott", "Mrs. Oakley", "Mr. Pembury",
    "Miss Quarles", "Admiral Rowe", "Mrs. Selwyn", "Mr. Thursby", "Miss Upton", "Lord Verney",
    "Mrs. Whitlock", "Mr. Yardley",
]  # fmt: skip
OBJECTS = [
    "grey mare", "pianoforte", "silver teapot", "barouche", "writing desk", "pearl necklace",
    "set of engravings", "walnut cabinet", "telescope", "harp", "carriage clock", "shawl",
    "chess set", "pair of candlesticks", "snuff box", "atlas", "music box", "Turkish carpet",
]  # fmt: skip
PLACES = [  # invented houses and villages: real cities are the needle test's
    "Ashcombe Hall", "Larkfield", "Winterbourne Lodge", "Fernleigh Park", "Hollins Cross",
    "Marlowe Abbey", "Brackenhurst", "Stanwell Grange", "Eversleigh", "Millbrook Cottage",
    "Thornbury Court", "Kelsall Priory", "Oakhanger", "Whitmoor House",
]  # fmt: skip
# (fact, question, answer field); the answer field appears exactly once in the fact.
TEMPLATES = [
    ("{name} paid {num} pounds for the {obj}.", "How much did {name} pay for the {obj}?", "num"),
    ("{name} travelled {num} miles to reach {place}.",
     "How many miles did {name} travel to reach {place}?", "num"),
    ("The account of {name} at the bank was number {num}.",
     "What was the number of {name}'s account at the bank?", "num"),
    ("The letter for {name} was kept in drawer {num}.",
     "In which drawer was the letter for {name} kept?", "num"),
    ("The {obj} of {name} was listed in the inventory as item {num}.",
     "Which item number was the {obj} of {name} in the inventory?", "num"),
    ("{name} sent the {obj} to {place}.", "Where did {name} send the {obj}?", "place"),
    ("The {obj} at {place} belonged to {name}.", "Who owned the {obj} at {place}?", "name"),
    ("{name} gave {place} a {obj} as a present.", "What did {name} give {place}?", "obj"),
]  # fmt: skip
SENTENCE_END = re.compile(r"(?<=[.!?\"'])\s+(?=[A-Z\"'])")
ABBREV = re.compile(r"\b(Mr|Mrs|Dr|St|Col|Capt|Messrs)\.$")


def random_number(rng: random.Random) -> str:
    """1 to 12 digits, never 7 (the needle's length), no leading zero."""
    digits = rng.choice([d for d in range(1, 13) if d != 7])
    return str(rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1))


def _values(rng: random.Random, names: list[str] = NAMES) -> dict[str, str]:
    return {
        "name": rng.choice(names),
        "obj": rng.choice(OBJECTS),
        "place": rng.choice(PLACES),
        "num": random_number(rng),
    }


def sentences(text: str) -> list[str]:
    """Rough sentence split that keeps "Mr. Darcy" together."""
    out: list[str] = []
    for piece in SENTENCE_END.split(text.replace("\n\n", " ")):
        if out and ABBREV.search(out[-1]):
            out[-1] += " " + piece
        else:
            out.append(piece)
    return out


def _passage(rng: random.Random, sents: list[str], words: int) -> list[str]:
    """Consecutive sentences of one document, about `words` words long."""
    start = end = rng.randrange(len(sents))
    count = 0
    while count < words and (end < len(sents) or start > 0):
        if end < len(sents):  # grow forward, then backward at the document's end
            count += len(sents[end].split())
            end += 1
        else:
            start -= 1
            count += len(sents[start].split())
    return sents[start:end]


def planted_pools(facts_cfg) -> tuple[list[tuple[str, str, str]], list[str]]:  # noqa: ANN001
    """data.facts' templates and keys as this module's (fact, question, "num") and names: the
    pretraining's planted language asked in the SFT format (data.sft_fact_share)."""
    spec = spec_from_cfg(facts_cfg)
    if not spec.templates:
        raise ValueError("data.sft_fact_share > 0 needs data.facts (templates, titles, names)")

    def ours(text: str) -> str:
        return text.replace("{key}", "{name}").replace("{value}", "{num}")

    return [(ours(f), ours(q), "num") for f, q in spec.templates], list(spec.keys)


def make_example(
    rng: random.Random, sents: list[str], lo: int, hi: int, answerable: bool,
    templates: list[tuple[str, str, str]] = TEMPLATES, names: list[str] = NAMES,
    colon: bool = False,
):  # fmt: skip
    """One SQuAD-format row (without id/title); colon: a number is written after a colon
    ("... is: 48213."), as labels and ledgers write them (data.sft_colon_share)."""
    fact, question, field = rng.choice(templates)
    fact = fact_colon(fact, colon and field == "num", "num")
    vals = _values(rng, names)
    facts = [fact.format(**vals)]
    if rng.random() < 0.5:  # a distractor: the same kind of fact about someone else
        other = {**_values(rng, names), "name": rng.choice([n for n in names if n != vals["name"]])}
        facts.append(fact.format(**other))
    if not answerable:
        # ask about a name that occurs in no fact of this context
        used = {vals["name"]} | {n for n in names if any(n in f for f in facts)}
        vals = {**vals, "name": rng.choice([n for n in names if n not in used])}
    sents = _passage(rng, sents, rng.randint(lo, hi))
    for f in facts:  # insert each fact at a random depth
        sents.insert(rng.randint(0, len(sents)), f)
    context = " ".join(sents)
    q = question.format(**vals)
    if not answerable:
        return {"context": context, "question": q, "answers": {"text": [], "answer_start": []}}
    # answer_start: where the field's value sits inside the first (true) fact
    where = context.index(facts[0]) + len(fact.split("{" + field + "}")[0].format(**vals))
    return {
        "context": context,
        "question": q,
        "answers": {"text": [vals[field]], "answer_start": [where]},
    }


def generate_squad(data_cfg: DictConfig, seed: int | None = None):
    """data.sft_num_examples rows as a datasets.Dataset with SQuAD 2.0 columns."""
    import datasets

    seed = int(data_cfg.sft_seed if seed is None else seed)
    train = load_embedded(data_cfg, "train")
    docs = [sentences(t) for t in train["text"]]
    titles = [f"{b} ch. {c}" for b, c in zip(train["book"], train["chapter"], strict=True)]
    lo, hi = int(data_cfg.sft_context_words_min), int(data_cfg.sft_context_words_max)
    share = float(data_cfg.get("sft_fact_share", 0.0))
    colons = float(data_cfg.get("sft_colon_share", 0.0))
    planted = planted_pools(data_cfg.get("facts")) if share > 0 else None
    rows = []
    for i in range(int(data_cfg.sft_num_examples)):
        rng = row_stream(seed, i)
        answerable = rng.random() >= float(data_cfg.sft_unanswerable_fraction)
        doc = rng.randrange(len(docs))
        pools = planted if drawn(rng, share) else (TEMPLATES, NAMES)
        row = make_example(rng, docs[doc], lo, hi, answerable, *pools, colon=drawn(rng, colons))
        rows.append({"id": row_id(seed, i), "title": titles[doc], **row})
    return datasets.Dataset.from_list(rows, features=squad_features())


def row_stream(seed: int, i: int) -> random.Random:
    """Row i's own stream: row i is the same for any count; its first draw: answerable."""
    return random.Random(f"{seed}:{i}")


def row_id(seed: int, i: int) -> str:
    """Row i's id (ssmax.data.squad splits the set by it)."""
    return f"gen{seed}-{i:06d}"


def answerable_per_split(data_cfg: DictConfig) -> dict[str, int]:
    """split -> the generated rows that pass the SQuAD filter (answerable) in it, without
    generating them: each row's first draw and its id (milliseconds for thousands)."""
    seed, unanswerable = int(data_cfg.sft_seed), float(data_cfg.sft_unanswerable_fraction)
    val = float(data_cfg.sft_val_fraction)
    counts = {"train": 0, "validation": 0}
    for i in range(int(data_cfg.sft_num_examples)):
        if row_stream(seed, i).random() >= unanswerable:
            counts[split_of(row_id(seed, i), val, 0.0)] += 1
    return counts
