"""Data layer on the embedded corpus: corpus file, tokenizers, splits, packing, SQuAD-format SFT."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.config.schema import DataConfig, FactsConfig
from ssmax.data.corpus import EMBEDDED_FILE, embedded_sha, load_documents
from ssmax.data.lm import test_sequences
from ssmax.data.lm_module import LMDataModule
from ssmax.data.packing import EpochShuffleSampler, pack
from ssmax.data.sft_batches import (
    IGNORE,
    encode_example,
    prompt_ids,
    to_example,
    trim_padding,
)
from ssmax.data.sft_module import SFTDataModule
from ssmax.data.squad import load_squad
from ssmax.data.squad_gen import generate_squad
from ssmax.data.tokenizer import GPT2_FILES, bpe_path, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
GPT2_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
VOCAB = 300  # small: trains in a fraction of a second


def data_cfg(cache: Path, **over) -> DictConfig:
    base = OmegaConf.merge(  # the schema's defaults, then the embedded option's
        OmegaConf.structured(DataConfig), OmegaConf.load(ROOT / "conf" / "data" / "embedded.yaml")
    )
    over = {"cache_dir": str(cache), "vocab_size": VOCAB, "seq_len": 32, **over}
    return OmegaConf.merge(base, over)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data_cache")


@pytest.fixture(scope="module")
def bpe(cache: Path):
    return load_tokenizer(data_cfg(cache))


def test_shipped_corpus_matches_provenance() -> None:
    text = (ROOT / "data" / "embedded" / "PROVENANCE.md").read_text()
    assert embedded_sha() in re.findall(r"`([0-9a-f]{64})`", text)
    assert EMBEDDED_FILE.stat().st_size < 3_000_000


def test_splits_disjoint_and_deterministic(cache: Path) -> None:
    cfg = data_cfg(cache)
    texts = {s: load_documents(cfg, s)["text"] for s in ("train", "validation", "test")}
    sets = {s: set(t) for s, t in texts.items()}
    assert all(len(t) > 0 for t in texts.values())
    assert not sets["train"] & sets["validation"] and not sets["train"] & sets["test"]
    assert not sets["validation"] & sets["test"]
    assert sum(len(t) for t in texts.values()) == 269  # all chapters of the six novels
    assert load_documents(cfg, "test")["text"] == texts["test"]


def test_bpe_round_trip_and_cache(cache: Path, bpe) -> None:
    text = "It is a truth universally acknowledged, that a single man\n\nis 1234567 rich."
    ids = bpe.encode(text)
    assert bpe.decode(ids) == text and max(ids) < VOCAB
    assert bpe.vocab_size == VOCAB and bpe.decode([bpe.eos_id]) == "<|endoftext|>"
    assert bpe.encode_batch([text, "Emma"]) == [ids, bpe.encode("Emma")]
    path = bpe_path(data_cfg(cache))
    mtime = path.stat().st_mtime_ns
    again = load_tokenizer(data_cfg(cache))  # cached: no retraining, same fingerprint
    assert path.stat().st_mtime_ns == mtime and again.name == bpe.name


@pytest.mark.parametrize("kind", ["bpe", "gpt2"])
def test_tokenizers_pickle_as_where_they_came_from(cache: Path, kind: str) -> None:
    """NIAH's builder processes get the tokenizer with every task: it pickles as its file or
    name (a few hundred bytes, not its tables) and loads once a process."""
    over = {"tokenizer": "gpt2", "vocab_size": 50257} if kind == "gpt2" else {}
    tok = load_tokenizer(data_cfg(cache, **over))
    data = pickle.dumps(tok)
    text = "The special magic Lisbon number is: 1234567."
    again = pickle.loads(data)
    assert len(data) < 300 and again.name == tok.name and again.encode(text) == tok.encode(text)
    assert pickle.loads(data) is again  # one instance a process: token_bytes' tables built once


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"tokenizer": "sentencepiece"}, "data.tokenizer"),
        ({"tokenizer": "gpt2", "vocab_size": 4096}, "data.vocab_size"),
        ({"tokenizer": "bpe", "vocab_size": 200}, "data.vocab_size"),
    ],
)
def test_bad_tokenizer_settings(cache: Path, over: dict, key: str) -> None:
    with pytest.raises(ValueError, match=re.escape(key)) as err:
        load_tokenizer(data_cfg(cache, **over))
    assert "\n" not in str(err.value)


def test_gpt2_offline(tmp_path: Path) -> None:
    """A fresh process with no usable network: seeded tiktoken cache, pinned hashes."""
    bad = tmp_path / "tiktoken"
    bad.mkdir()
    # a corrupted cache entry (tiktoken names it by the sha1 of the URL) must be replaced
    names = {f: hashlib.sha1((GPT2_URL + f).encode()).hexdigest() for f in GPT2_FILES}
    (bad / names["vocab.bpe"]).write_text("junk")
    code = (
        "from omegaconf import OmegaConf; from ssmax.data.tokenizer import load_tokenizer;"
        f"t = load_tokenizer(OmegaConf.create({{'tokenizer': 'gpt2', 'vocab_size': 50257,"
        f"'cache_dir': '{tmp_path}'}}));"
        "print(t.encode('Hello world'), t.eos_id, t.vocab_size, t.decode([15496, 995]))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIKTOKEN")}
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[15496, 995] 50256 50257 Hello world"
    for fname, name in names.items():  # the pinned files, and nothing else
        assert hashlib.sha256((bad / name).read_bytes()).hexdigest() == GPT2_FILES[fname]
    assert len(list(bad.iterdir())) == 2


def test_pack_inserts_eos_and_drops_tail() -> None:
    rows = pack([[1, 2, 3], [4, 5], [6, 7, 8, 9]], eos_id=0, seq_len=3)
    assert rows.tolist() == [[1, 2, 3, 0], [4, 5, 0, 6], [7, 8, 9, 0]]


def test_epoch_sampler_is_seeded_and_reshuffles() -> None:
    a, b = EpochShuffleSampler(50, seed=3), EpochShuffleSampler(50, seed=3)
    first = list(a)
    assert first == list(b) and sorted(first) == list(range(50))
    second = list(a)  # the next epoch: indices epoch * n + i, in another order
    assert sorted(second) == list(range(50, 100))
    assert [k % 50 for k in second] != first
    a.set_epoch(0)
    assert list(a) == first


def test_lm_datamodule_batches(cache: Path, bpe) -> None:
    cfg = data_cfg(cache, seq_len=16)
    dm = LMDataModule(cfg, batch_size=4, seed=1, eval_batch_size=8)
    dm.prepare_data()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 16) and batch["input_ids"].dtype == torch.long
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])
    rows = dm.dataset("train").rows
    assert (rows == bpe.eos_id).any()  # documents are separated by EOS
    again = LMDataModule(cfg, batch_size=4, seed=1)
    again.setup("fit")
    assert torch.equal(next(iter(again.train_dataloader()))["input_ids"], batch["input_ids"])
    assert next(iter(dm.val_dataloader()))["input_ids"].shape == (8, 16)


def test_planted_rows_reach_a_loader_process_started_by_forkserver(cache: Path, bpe) -> None:
    """A local pipeline worker's loaders start by forkserver, which pickles the dataset and so
    its fact planter: the batches there equal this process's, facts planted the same."""
    facts = OmegaConf.merge(OmegaConf.structured(FactsConfig), {"fraction": 1.0})
    cfg = data_cfg(cache, seq_len=128, facts=facts)
    dm = LMDataModule(cfg, batch_size=4, seed=1)
    dm.prepare_data()
    dm.setup("fit")
    ds = dm.dataset("train")
    here = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert here["answer"].any()  # facts were planted and asked
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1,
                                         multiprocessing_context="forkserver")  # fmt: skip
    there = next(iter(loader))
    assert here.keys() == there.keys()
    assert all(torch.equal(here[k], there[k]) for k in here)


def test_test_sequences(cache: Path, bpe) -> None:
    cfg = data_cfg(cache)
    seqs = test_sequences(cfg, bpe, length=6000, count=3, seed=0)
    assert seqs.shape == (3, 6000) and (seqs == bpe.eos_id).any()  # documents joined by EOS
    assert torch.equal(seqs, test_sequences(cfg, bpe, length=6000, count=3, seed=0))
    test_text = " ".join(load_documents(cfg, "test")["text"])
    assert bpe.decode(seqs[0, 1:40].tolist()).split()[2] in test_text


def test_generated_squad(cache: Path) -> None:
    cfg = data_cfg(cache, sft_num_examples=300)
    raw = generate_squad(cfg)
    assert len(raw) == 300 and raw[:5] == generate_squad(cfg)[:5]
    assert raw["id"] != generate_squad(cfg, seed=1)["id"] or raw[0] != generate_squad(cfg, 1)[0]
    empty = [a for a in raw["answers"] if not a["text"]]
    assert 0 < len(empty) < 100  # some unanswerable items before the filter
    digits = 0
    for ex in raw:
        assert "special magic" not in ex["context"]
        for start, text in zip(ex["answers"]["answer_start"], ex["answers"]["text"], strict=True):
            assert ex["context"][start:].startswith(text)
            digits += text.isdigit()
            assert not (text.isdigit() and len(text) == 7)  # reserved for the needle test
    assert digits > 100
    kept = load_squad(cfg, "train")
    val = load_squad(cfg, "validation")
    assert len(kept) + len(val) == 300 - len(empty)
    assert not set(kept["id"]) & set(val["id"])


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_generated_squad_in_the_planted_language(cache: Path, share: float) -> None:
    """data.sft_fact_share: that share of items asks a data.facts question about a data.facts
    key, its answer a number in the context; the rest are the set's own templates."""
    facts = OmegaConf.structured(FactsConfig)
    cfg = data_cfg(cache, sft_num_examples=200, sft_fact_share=share, facts=facts)
    planted = [re.escape(t.question).replace(re.escape("{key}"), "(.+)") for t in facts.templates]
    keys = {f"{t} {n}" for t in facts.titles for n in facts.names}
    asked = 0
    for ex in generate_squad(cfg):
        match = next((m for p in planted if (m := re.fullmatch(p, ex["question"]))), None)
        if match:
            asked += 1
            assert match.group(1) in keys
        for start, text in zip(ex["answers"]["answer_start"], ex["answers"]["text"], strict=True):
            assert ex["context"][start:].startswith(text)
            assert not match or (text.isdigit() and len(text) != 7)
    assert (asked == 0) if share == 0 else (asked == 200 if share == 1 else 60 < asked < 140)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_generated_squad_numbers_after_a_colon(cache: Path, share: float) -> None:
    """data.sft_colon_share: that share of the facts writes its number after a colon (as the
    needle does: "is: 8106422"); the answer span stays the number."""
    facts = OmegaConf.structured(FactsConfig)
    cfg = data_cfg(cache, sft_num_examples=120, sft_colon_share=share, sft_fact_share=0.5,
                   facts=facts)  # fmt: skip
    numbers = 0
    for ex in generate_squad(cfg):
        for start, text in zip(ex["answers"]["answer_start"], ex["answers"]["text"], strict=True):
            assert ex["context"][start:].startswith(text)
            if text.isdigit():
                numbers += 1
                assert (ex["context"][start - 2 : start] == ": ") == (share == 1.0), ex
    assert numbers > 40


def test_planted_sft_share_needs_templates(cache: Path) -> None:
    facts = OmegaConf.merge(OmegaConf.structured(FactsConfig), {"templates": []})
    cfg = data_cfg(cache, sft_num_examples=5, sft_fact_share=0.5, facts=facts)
    with pytest.raises(ValueError, match="sft_fact_share"):
        generate_squad(cfg)


def test_sft_labels_cover_answer_and_eos(bpe) -> None:
    ex = {
        "context": "Mr. Ashby paid 4521 pounds for the harp. " * 2,
        "question": "How much did Mr. Ashby pay for the harp?",
        "answers": {"text": ["4521"], "answer_start": [15]},
    }
    ids, n_prompt = encode_example(bpe, ex, seq_len=200)
    assert ids[:n_prompt] == prompt_ids(bpe, ex["context"], ex["question"])
    out = to_example(ids, n_prompt, 200, bpe.eos_id)
    mask = out["labels"] != IGNORE
    assert bpe.decode(out["labels"][mask].tolist()) == " 4521<|endoftext|>"
    assert mask.sum() == len(ids) - n_prompt
    assert torch.equal(out["labels"][: len(ids) - 1], torch.tensor(ids[1:]).masked_fill(
        torch.arange(len(ids) - 1) < n_prompt - 1, IGNORE))  # fmt: skip
    assert (out["input_ids"][len(ids) - 1 :] == bpe.eos_id).all()


def test_sft_trims_context_around_answer(bpe) -> None:
    filler = "She walked slowly along the hedgerow and thought of nothing at all. " * 30
    ctx = filler + "Mr. Ashby paid 4521 pounds for the harp. " + filler
    ex = {
        "context": ctx,
        "question": "How much did Mr. Ashby pay for the harp?",
        "answers": {"text": ["4521"], "answer_start": [ctx.index("4521")]},
    }
    ids, n_prompt = encode_example(bpe, ex, seq_len=64)
    assert len(ids) <= 65 and "4521" in bpe.decode(ids[:n_prompt])
    assert encode_example(bpe, ex, seq_len=8) is None  # even the question does not fit


def test_trim_padding_keeps_the_loss(bpe) -> None:
    """Dropping the pad columns after the longest example changes no loss term."""
    from ssmax.model import ModelConfig, Transformer, VariantConfig
    from ssmax.model.loss import model_loss

    lengths = [(30, 20), (55, 40), (41, 37)]  # (ids, prompt) per example
    batch = [to_example(list(range(5, 5 + n)), p, 96, bpe.eos_id) for n, p in lengths]
    trimmed = trim_padding(batch)
    assert trimmed["input_ids"].shape == (3, 54)  # the longest example's inputs
    assert trim_padding(batch, multiple=32)["input_ids"].shape == (3, 64)  # few compiled shapes
    assert trim_padding(batch, multiple=256)["input_ids"].shape == (3, 96)  # at most seq_len
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=128, n_layers=2, n_heads=2, dim=32, ffn_dim=64),
                        VariantConfig(name="b_ssmax", scale="log_n", learn_s=True), 96)  # fmt: skip
    full = {k: torch.stack([ex[k] for ex in batch]) for k in batch[0]}
    losses = [model_loss(model, b["input_ids"], b["labels"], "sft") for b in (full, trimmed)]
    torch.testing.assert_close(losses[0], losses[1])


def test_sft_datamodule(cache: Path) -> None:
    cfg = data_cfg(cache, seq_len=128, sft_num_examples=120)
    dm = SFTDataModule(cfg, batch_size=4, seed=0)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    width = batch["labels"].shape[1]
    assert batch["input_ids"].shape == batch["labels"].shape and width <= 128
    assert (batch["labels"][:, -1] != IGNORE).any()  # trimmed right after the longest answer
    for labels in batch["labels"]:
        kept = labels[labels != IGNORE].tolist()
        assert kept and kept[-1] == dm.tokenizer.eos_id
    # under a compiled loss: every width a multiple of 64 (few graphs) or the whole seq_len
    cfg = data_cfg(cache, seq_len=512, sft_num_examples=120)
    exact, rounded = (SFTDataModule(cfg, batch_size=2, seed=0, width_multiple=m) for m in (1, 64))
    for dm in (exact, rounded):
        dm.setup("fit")
    for a, b in zip(exact.train_dataloader(), rounded.train_dataloader(), strict=True):
        width = a["labels"].shape[1]
        assert b["labels"].shape[1] == min(512, -(-width // 64) * 64)
        assert torch.equal(b["labels"][:, :width], a["labels"])  # the same rows, more padding
