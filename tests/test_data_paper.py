"""The paper's data path without the hub: tiny local files in SlimPajama's and SQuAD 2.0's
formats, and a fast, clear failure when the hub is unreachable."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.config.schema import DataConfig
from ssmax.data.corpus import load_documents
from ssmax.data.hub import DataUnavailableError
from ssmax.data.lm_module import LMDataModule
from ssmax.data.squad import load_squad

ROOT = Path(__file__).resolve().parents[1]
UNREACHABLE = "http://127.0.0.1:9"  # discard port: connection refused at once


def paper_cfg(cache: Path, **over) -> DictConfig:
    base = OmegaConf.merge(  # the schema's defaults, then the embedded option's
        OmegaConf.structured(DataConfig), OmegaConf.load(ROOT / "conf" / "data" / "embedded.yaml")
    )
    paper = OmegaConf.load(ROOT / "conf" / "data" / "slimpajama.yaml")
    paper.pop("defaults", None)
    over = {"cache_dir": str(cache), "tokenizer": "bpe", "vocab_size": 300, "seq_len": 16, **over}
    return OmegaConf.merge(base, paper, over)


def slimpajama_lines(n: int, tag: str) -> list[str]:
    return [
        json.dumps(
            {
                "text": f"{tag} document {i}: " + "words " * (5 + i % 7),
                "meta": {"redpajama_set_name": "RedPajamaC4"},
            }
        )  # fmt: skip
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def slim_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("slimpajama")
    files = {}
    for split in ("train", "validation", "test"):
        path = d / f"{split}.jsonl"
        path.write_text("\n".join(slimpajama_lines(40, split)) + "\n")
        files[split] = str(path)
    return files


def test_slimpajama_local_jsonl(tmp_path: Path, slim_files: dict[str, str]) -> None:
    cfg = paper_cfg(tmp_path, slimpajama_files=slim_files)
    docs = list(load_documents(cfg, "validation"))
    assert len(docs) == 40 and docs[0] == {"text": docs[0]["text"]}
    assert docs[0]["text"].startswith("validation document 0")


def test_slimpajama_single_list_is_hash_split(tmp_path: Path, slim_files) -> None:
    cfg = paper_cfg(tmp_path, slimpajama_files=[slim_files["train"]], val_fraction=0.3)
    train = {d["text"] for d in load_documents(cfg, "train")}
    val = {d["text"] for d in load_documents(cfg, "validation")}
    assert train and val and not train & val and len(train | val) == 40
    with pytest.raises(ValueError, match="data.test_fraction"):
        load_documents(cfg, "test")


def test_slimpajama_local_zst(tmp_path: Path) -> None:
    zstd = pytest.importorskip("zstandard")
    path = tmp_path / "chunk_0.jsonl.zst"
    raw = ("\n".join(slimpajama_lines(10, "zst")) + "\n").encode()
    path.write_bytes(zstd.ZstdCompressor().compress(raw))
    cfg = paper_cfg(tmp_path, slimpajama_files={"train": [str(path)]})
    assert [d["text"] for d in load_documents(cfg, "train")][3].startswith("zst document 3")


def test_streaming_datamodule_packs_on_the_fly(tmp_path: Path, slim_files) -> None:
    cfg = paper_cfg(tmp_path, slimpajama_files=slim_files, max_eval_sequences=5)
    dm = LMDataModule(cfg, batch_size=4, seed=0)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 16)
    assert torch.equal(batch["input_ids"][:, 1:], batch["labels"][:, :-1])
    assert (batch["input_ids"] == dm.tokenizer.eos_id).any()
    again = LMDataModule(cfg, batch_size=4, seed=0)
    again.setup("fit")
    assert torch.equal(next(iter(again.train_dataloader()))["input_ids"], batch["input_ids"])
    val = [b["input_ids"].shape[0] for b in dm.val_dataloader()]
    assert sum(val) == 5  # max_eval_sequences bounds the streamed validation split


HANG_GUARD_S = 60


@pytest.mark.parametrize("kind", ["slimpajama", "squad"])
def test_unreachable_hub_fails_fast(tmp_path: Path, monkeypatch, kind: str) -> None:
    monkeypatch.setenv("HF_ENDPOINT", UNREACHABLE)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    cfg = paper_cfg(tmp_path)
    start = time.monotonic()
    with pytest.raises(DataUnavailableError) as err:
        if kind == "slimpajama":
            load_documents(cfg, "train")
        else:
            load_squad(cfg, "train")
    # A hang guard, not a speed test: require_hub waits at most its 3 s timeout for the probe;
    # datasets alone would retry for minutes. Slow or loaded machines stay far inside it.
    assert time.monotonic() - start < HANG_GUARD_S
    msg = str(err.value)
    assert "\n" not in msg and UNREACHABLE in msg
    assert ("data.slimpajama_files" if kind == "slimpajama" else "data.squad_files") in msg


def test_silent_hub_fails_within_seconds(tmp_path: Path, monkeypatch) -> None:
    """An endpoint that accepts connections but never answers (where datasets would hang)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        start = time.monotonic()
        with pytest.raises(DataUnavailableError, match="data.slimpajama_files"):
            load_documents(paper_cfg(tmp_path), "train")
        assert time.monotonic() - start < HANG_GUARD_S


NESTED = {
    "version": "v2.0",
    "data": [
        {
            "title": "Normans",
            "paragraphs": [
                {
                    "context": "The Normans gave their name to Normandy, a region in France.",
                    "qas": [
                        {"id": "a1", "question": "In what country is Normandy located?",
                         "answers": [{"text": "France", "answer_start": 53}],
                         "is_impossible": False},
                        {"id": "a2", "question": "Who gave their name to Paris?",
                         "answers": [], "plausible_answers": [], "is_impossible": True},
                    ],
                },
                {"context": "", "qas": [{"id": "a3", "question": "Empty context?",
                                         "answers": [{"text": "x", "answer_start": 0}]}]},
            ],
        }
    ],
}  # fmt: skip
FLAT = [
    {"id": "b1", "title": "T", "context": "Emma lived at Hartfield.", "question": "Where?",
     "answers": {"text": ["Hartfield"], "answer_start": [14]}},
    {"id": "b2", "title": "T", "context": "Emma lived at Hartfield.", "question": "Why?",
     "answers": {"text": [], "answer_start": []}},
    {"id": "b3", "title": "T", "context": "Emma lived at Hartfield.", "question": " ",
     "answers": {"text": ["Emma"], "answer_start": [0]}},
]  # fmt: skip


def test_squad_local_formats_and_filter(tmp_path: Path) -> None:
    import datasets

    nested = tmp_path / "train-v2.0.json"
    nested.write_text(json.dumps(NESTED))
    flat = tmp_path / "train.jsonl"
    flat.write_text("\n".join(json.dumps(r) for r in FLAT) + "\n")
    parquet = tmp_path / "validation.parquet"
    datasets.Dataset.from_list(FLAT[:2]).to_parquet(str(parquet))
    files = {"train": [str(nested), str(flat)], "validation": str(parquet)}
    cfg = paper_cfg(tmp_path, squad_files=files)
    assert len(load_squad(cfg, "train", filtered=False)) == 6
    train = load_squad(cfg, "train")  # the paper's filter keeps a1 and b1 only
    assert train["id"] == ["a1", "b1"]
    assert set(train.column_names) == {"id", "title", "context", "question", "answers"}
    for ex in train:
        start, text = ex["answers"]["answer_start"][0], ex["answers"]["text"][0]
        assert ex["context"][start:].startswith(text)
    assert load_squad(cfg, "validation")["id"] == ["b1"]
