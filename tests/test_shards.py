"""Pre-tokenized shards: `python -m ssmax.data.prepare` writes them once, training reads them.

The shards' rows are the rows the on-the-fly paths make from the same documents; the prepared
folder appears whole or not at all; bad settings fail in one line. (Ranks and resume: the rows
are a map-style dataset under the same sampler as the embedded corpus, which
test_ddp_data.py and test_resume.py run for real.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from ssmax.config.compose import ConfigError
from ssmax.data.corpus import load_documents
from ssmax.data.lm import packed_rows
from ssmax.data.lm_module import LMDataModule
from ssmax.data.packing import pack
from ssmax.data.prepare import main as prepare_main
from ssmax.data.shards import TokenShards, read_manifest
from ssmax.data.tokenizer import load_tokenizer
from tests.conftest import make_cfg
from tests.ddp_helpers import slimpajama_files


def prepare(*overrides: str) -> int:
    return prepare_main(["preset=smoke", "data.prepare_num_proc=1", *overrides])


@pytest.mark.slow
def test_embedded_shards_equal_the_packed_rows(tmp_path: Path, shared_cache: Path) -> None:
    folder = tmp_path / "shards"
    settings = [f"paths.cache_dir={shared_cache}", f"data.shards_dir={folder}"]
    assert prepare(*settings) == 0
    cfg = make_cfg("preset=smoke", *settings)
    tok = load_tokenizer(cfg.data)
    manifest = read_manifest(folder)
    for split in ("train", "validation"):
        shards = TokenShards(folder, split, cfg.data.seq_len, tok)
        want = packed_rows(cfg.data, tok, split)  # the embedded path, tokenized in process
        assert len(shards) == len(want) > 0
        got = torch.stack([torch.cat([r["input_ids"], r["labels"][-1:]]) for r in shards])
        assert torch.equal(got, want)
        for entry in manifest["splits"][split]["files"]:
            data = (folder / entry["name"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert manifest["tokenizer"] == tok.name and manifest["eos_id"] == tok.eos_id

    mtime = (folder / "manifest.json").stat().st_mtime_ns
    assert prepare(*settings) == 0  # prepared already: nothing is rewritten
    assert (folder / "manifest.json").stat().st_mtime_ns == mtime
    assert prepare(*settings, "data.vocab_size=600") == 2  # another tokenizer, same folder
    assert not list(tmp_path.glob(".shards.*.tmp"))  # no half-written folder left behind

    dm = LMDataModule(cfg.data, batch_size=4, seed=0)  # training reads them
    dm.setup("fit")
    assert isinstance(dm.dataset("train"), TokenShards)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, cfg.data.seq_len)


def test_slimpajama_files_in_parallel(tmp_path: Path, shared_cache: Path) -> None:
    """Several files per split, one shard file each, two processes: the split's token stream is
    its documents tokenized in corpus order; rows run across file boundaries."""
    parts = {}
    for i in range(3):
        folder = tmp_path / f"part{i}"
        folder.mkdir()
        parts[i] = slimpajama_files(folder, docs=40 + 10 * i)
    files = {s: [parts[i][s] for i in range(3)] for s in ("train", "validation", "test")}
    mapping = ",".join(f"{s}:[{','.join(f)}]" for s, f in files.items())
    data = ["data=slimpajama", "data.tokenizer=bpe", "data.vocab_size=512", "data.seq_len=64",
            f"data.slimpajama_files={{{mapping}}}", "data.prepare_files_per_shard=1",
            "data.prepare_num_proc=2", f"paths.cache_dir={shared_cache}",
            f"data.shards_dir={tmp_path / 'shards'}"]  # fmt: skip
    assert prepare(*data) == 0
    cfg = make_cfg("preset=smoke", *data)
    tok = load_tokenizer(cfg.data)
    texts = [d["text"] for d in load_documents(cfg.data, "train")]
    stream = [t for ids in tok.encode_batch(texts) for t in (*ids, tok.eos_id)]
    shards = TokenShards(tmp_path / "shards", "train", cfg.data.seq_len, tok)
    manifest = read_manifest(tmp_path / "shards")
    assert [f["documents"] for f in manifest["splits"]["train"]["files"]] == [40, 50, 60]
    assert torch.equal(torch.from_numpy(shards.tokens(0, len(stream)).astype("int64")),
                       torch.tensor(stream))  # fmt: skip
    rows = pack(tok.encode_batch(texts), tok.eos_id, cfg.data.seq_len)
    assert len(shards) == len(rows)
    k = manifest["splits"]["train"]["files"][0]["tokens"] // (cfg.data.seq_len + 1)
    assert torch.equal(shards[k]["input_ids"], rows[k, :-1])  # spans files 0 and 1


def test_bad_shards_settings_fail_in_one_line(tmp_path: Path, shared_cache: Path, capsys) -> None:
    assert prepare(f"paths.cache_dir={shared_cache}") == 2  # no data.shards_dir
    assert "data.shards_dir is not set" in capsys.readouterr().err
    no_files = ["data=slimpajama", "data.tokenizer=bpe", "data.vocab_size=512"]
    assert prepare(*no_files, f"data.shards_dir={tmp_path / 's'}") == 2
    err = capsys.readouterr().err
    assert "data.slimpajama_files" in err and err.count("\n") == 1
    cfg = make_cfg("preset=smoke", f"paths.cache_dir={shared_cache}")
    tok = load_tokenizer(cfg.data)
    with pytest.raises(ConfigError, match="has no manifest.json: prepare it first"):
        TokenShards(tmp_path, "train", 64, tok)
    folder = tmp_path / "shards"
    assert prepare(f"paths.cache_dir={shared_cache}", f"data.shards_dir={folder}") == 0
    with (folder / "train-00000.bin").open("r+b") as f:
        f.truncate(100)
    with pytest.raises(ConfigError, match="train-00000.bin has 100 bytes"):
        TokenShards(folder, "train", 64, tok)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["tokenizer"] = "gpt2-tiktoken"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="prepared with tokenizer gpt2-tiktoken"):
        TokenShards(folder, "validation", 64, tok)
