"""Planted facts (data.facts): deterministic, never the eval needle, answers recoverable from
the row, wired into the pretraining batches, off in the paper preset."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import compose
from ssmax.config.schema import DataConfig
from ssmax.data.fact_spec import FactSpec, check_spec, spec_from_cfg
from ssmax.data.facts import FactPlanter
from ssmax.data.lm import packed_rows
from ssmax.data.lm_module import LMDataModule
from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals.haystack import CITIES, NEEDLE, random_needle

ROOT = Path(__file__).resolve().parents[1]


def data_cfg(cache: Path, **over) -> DictConfig:
    base = OmegaConf.merge(  # the schema's defaults, then the embedded option's
        OmegaConf.structured(DataConfig), OmegaConf.load(ROOT / "conf" / "data" / "embedded.yaml")
    )
    over = {"cache_dir": str(cache), "vocab_size": 400, "seq_len": 128, **over}
    cfg = OmegaConf.merge(base, over)
    cfg.facts.fraction = 1.0
    return cfg


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory):
    cfg = data_cfg(tmp_path_factory.mktemp("facts"))
    tok = load_tokenizer(cfg)
    rows = packed_rows(cfg, tok, "validation")
    return cfg, tok, rows, FactPlanter(spec_from_cfg(cfg.facts), tok)


def test_same_seed_same_row(setup) -> None:
    _, _, rows, planter = setup
    row = rows[0].tolist()
    a = planter.plant(row, random.Random("s:1"))
    b = planter.plant(row, random.Random("s:1"))
    c = planter.plant(row, random.Random("s:2"))
    assert a[0] == b[0] and a[1] == b[1]
    assert a[0] != c[0]
    assert len(a[0]) == len(row)


def test_answers_are_recoverable_from_the_row(setup) -> None:
    """The asked value is written after its question and stated earlier by its fact."""
    _, tok, rows, planter = setup
    rng = random.Random(0)
    for i in range(40):
        ids, planted = planter.plant(rows[i % len(rows)].tolist(), rng)
        asked = [p for p in planted if p.answer is not None]
        assert len(asked) == planter.spec.questions_per_row
        for p in asked:
            a, b = p.answer
            assert tok.decode(ids[a:b]) == " " + p.value
            assert p.fact_at < a  # the fact comes first
            fact_text = tok.decode(ids[p.fact_at : a])
            assert p.key in fact_text and p.value in fact_text
            assert len(p.value) in range(planter.spec.digits[0], planter.spec.digits[1] + 1)


def test_facts_never_copy_the_eval_needle(setup) -> None:
    _, tok, rows, planter = setup
    rng = random.Random(1)
    needle_start = NEEDLE.split("{")[0].strip()  # "The special magic"
    for i in range(60):
        ids, planted = planter.plant(rows[i % len(rows)].tolist(), rng)
        text = tok.decode(ids)
        assert needle_start not in text and "magic" not in text
        assert not any(p.key.split()[-1] in CITIES for p in planted)
    city, number = random_needle(random.Random(0))
    bad = [("The special magic {key} code is {value}.", "What is it for {key}?")]
    with pytest.raises(ValueError, match="special"):
        check_spec(FactSpec(1.0, 1, 1, (4, 8), tuple(bad), ("Mr.",), ("Ashby",)))
    with pytest.raises(ValueError, match="city"):
        spec = planter.spec
        check_spec(FactSpec(1.0, 1, 1, (4, 8), spec.templates, ("Mr.",), (city,)))
    assert len(number) == 7


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [("fraction", 1.5, "fraction"), ("digits", [5, 2], "digits"),
     ("questions_per_row", 3, "questions_per_row"), ("templates", [], "templates")],
)  # fmt: skip
def test_bad_settings_name_the_key(setup, key: str, value: object, match: str) -> None:
    cfg = OmegaConf.create(OmegaConf.to_container(setup[0].facts))
    cfg[key] = value
    with pytest.raises(ValueError, match=f"data.facts.{match}"):
        spec_from_cfg(cfg)


def test_batches_carry_facts_fresh_each_epoch(setup) -> None:
    """Training rows are planted from (seed, epoch, row): the same on a re-run, different in
    the next pass; "answer" marks the label positions of each asked value."""
    cfg = setup[0].copy()
    cfg.seq_len, cfg.facts.fraction = 128, 0.5
    dm = LMDataModule(cfg, batch_size=4, seed=3)
    dm.setup("fit")
    ds, n = dm.dataset("train"), len(dm.dataset("train"))
    assert torch.equal(ds[5]["input_ids"], ds[5]["input_ids"])
    planted = [ds[k] for k in range(40)]
    share = sum(bool(x["answer"].any()) for x in planted) / len(planted)
    assert 0.25 < share < 0.75  # fraction 0.5
    x = next(x for x in planted if x["answer"].any())
    answer = dm.tokenizer.decode(x["labels"][x["answer"] > 0].tolist())
    assert answer.startswith(" ") and answer.strip().isdigit()
    # the same prose row in the next pass (k + n) carries other facts
    k = next(k for k in range(n) if ds[k]["answer"].any() and ds[k + n]["answer"].any())
    assert not torch.equal(ds[k]["input_ids"], ds[k + n]["input_ids"])
    unplanted = next(k for k in range(n) if not ds[k]["answer"].any())
    assert torch.equal(ds[unplanted]["input_ids"], dm.dataset("train").rows[unplanted][:-1])


def test_paper_preset_keeps_facts_off_and_tiny_turns_them_on() -> None:
    assert compose("preset=paper").data.facts.fraction == 0
    assert compose("preset=tiny").data.facts.fraction > 0
    assert compose("preset=smoke").data.facts.fraction > 0


def test_a_tokenizer_trained_with_the_planted_facts_writes_numbers_in_chunks(
    tmp_path: Path,
) -> None:
    """data.facts.in_tokenizer: the BPE also learns from planted facts, so numbers come in
    multi-digit tokens, as GPT-2's BPE writes them; cached apart from the corpus-only BPE."""
    from ssmax.data.tokenizer import bpe_path

    prose = data_cfg(tmp_path, vocab_size=1024)
    planted = data_cfg(tmp_path, vocab_size=1024)
    planted.facts.in_tokenizer = 20000
    number = " 8106422"
    assert len(load_tokenizer(prose).encode(number)) == 8  # " " and one token a digit
    tok = load_tokenizer(planted)
    assert 2 <= len(tok.encode(number)) <= 4 and tok.decode(tok.encode(number)) == number
    assert bpe_path(planted) != bpe_path(prose) and bpe_path(planted).is_file()
    other = data_cfg(tmp_path, vocab_size=1024)
    other.facts.in_tokenizer, other.facts.digits = 20000, [2, 3]
    assert bpe_path(other) != bpe_path(planted)  # what the facts are is in the key
    older = OmegaConf.create(OmegaConf.to_container(prose))  # a node config from before the key
    del older.facts["in_tokenizer"]
    assert bpe_path(older) == bpe_path(prose)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_values_after_a_colon(setup, share: float) -> None:
    """data.facts.colon_share: that share of facts write their value after a colon, as the
    needle does ("is: 8106422"); the question and its answer are as before."""
    cfg, tok, rows, _ = setup
    facts = OmegaConf.merge(cfg.facts, {"colon_share": share})
    planter = FactPlanter(spec_from_cfg(facts), tok)
    planter.check_fits(len(rows[0]))
    rng, seen = random.Random(0), 0
    for i in range(30):
        ids, planted = planter.plant(rows[i % len(rows)].tolist(), rng)
        for p in planted:
            if p.answer is None:
                continue
            fact_text = tok.decode(ids[p.fact_at : p.answer[0]])
            assert (f": {p.value}" in fact_text) == (share == 1.0), fact_text
            assert tok.decode(ids[p.answer[0] : p.answer[1]]) == " " + p.value
            seen += 1
    assert seen >= 30
