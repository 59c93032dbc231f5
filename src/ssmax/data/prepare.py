"""`python -m ssmax.data.prepare [hydra overrides]`: tokenize the pretraining corpus once into
uint16 shards that training reads with ``data.shards_dir`` set (ssmax.data.shards).

    python -m ssmax.data.prepare preset=paper data.slimpajama_files=... data.shards_dir=/scratch/sp

For the train and validation splits: the documents in corpus order (as ``load_documents`` gives
them), tokenized with the configured tokenizer, each followed by EOS. The input files are cut
into groups of ``data.prepare_files_per_shard``; datasets' ``map`` with
``num_proc=data.prepare_num_proc`` runs one group per call, which streams its files and writes
one shard file (no text cache on disk, no token lists in memory). Everything is written into a
temporary folder, with manifest.json last, and renamed to data.shards_dir: a folder that exists
is complete. Reads local files only: data=embedded, or data.slimpajama_files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError, check_cli_choices, compose
from ssmax.data.corpus import embedded_jsonl, embedded_sha, split_of
from ssmax.data.hub import offline
from ssmax.data.identity import listed_files
from ssmax.data.shards import DTYPE, FORMAT, MANIFEST, read_manifest
from ssmax.data.tokenizer import Tokenizer, load_tokenizer
from ssmax.files.atomic import atomic_dir, atomic_write_json

SPLITS = ("train", "validation")  # the evals read the test split's text
ENCODE_BATCH = 256  # documents per tokenizer call


def inputs(data_cfg: DictConfig) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """(split -> input files, the source's identity for the manifest). Files named per split
    are taken whole; one list (or the embedded corpus) is split by a hash of each document."""
    if data_cfg.source == "embedded":
        path = str(embedded_jsonl(data_cfg))
        source = {"source": "embedded", "sha256": embedded_sha()}
        files: Any = [path]
    elif data_cfg.source == "slimpajama" and data_cfg.slimpajama_files:
        files = OmegaConf.to_container(data_cfg.slimpajama_files, resolve=True)
        files = [files] if isinstance(files, str) else files
        source = {"source": "slimpajama", "files": files}
    else:
        raise ConfigError(
            "prepare reads local files: set data.slimpajama_files (SlimPajama's jsonl.zst, "
            "e.g. downloaded with `hf download cerebras/SlimPajama-627B --repo-type dataset`) "
            "or use data=embedded"
        )
    if isinstance(files, dict):
        missing = [s for s in SPLITS if s not in files]
        if missing:
            raise ConfigError(f"data.slimpajama_files has no {missing[0]} files")
        by_split = {s: [str(Path(f).resolve()) for f in listed_files(files[s])] for s in SPLITS}
        return by_split, source
    fractions = {"val_fraction": data_cfg.val_fraction, "test_fraction": data_cfg.test_fraction}
    if data_cfg.val_fraction <= 0:
        raise ConfigError("data.val_fraction must be > 0 to split one file list")
    every = [str(Path(f).resolve()) for f in files]
    return {s: every for s in SPLITS}, source | fractions | {"hash_split": True}


def documents(files: list[str], split: str, hashed: list[float] | None) -> Iterator[str]:
    """The texts of the files, in order; with ``hashed`` ([val, test] fractions) only those of
    this split (by the hash of each text, as data.corpus splits one file list)."""
    import datasets

    for path in files:
        with offline():
            ds = datasets.load_dataset("json", data_files=[path], split="train", streaming=True)
        for batch in ds.select_columns(["text"]).iter(batch_size=ENCODE_BATCH):
            for text in batch["text"]:
                if hashed is None or split_of(text, *hashed) == split:
                    yield text


_TOKENIZERS: dict[str, Tokenizer] = {}  # one per worker process


def write_shard(
    task: dict[str, Any], data_cfg: dict[str, Any], out: str, hashed: list[float] | None
) -> dict[str, Any]:
    """One map call: tokenize a group of files into ``out/<split>-<index>.bin``."""
    key = json.dumps(data_cfg, sort_keys=True)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = load_tokenizer(OmegaConf.create(data_cfg))
    tok = _TOKENIZERS[key]
    name, digest, tokens, docs = f"{task['split']}-{task['index']:05d}.bin", hashlib.sha256(), 0, 0
    texts = documents(task["files"], task["split"], hashed)
    with open(Path(out) / name, "wb") as f:
        while batch := list(itertools.islice(texts, ENCODE_BATCH)):
            ids = [t for doc in tok.encode_batch(batch) for t in (*doc, tok.eos_id)]
            data = np.asarray(ids, dtype=DTYPE).tobytes()
            f.write(data)
            digest.update(data)
            tokens, docs = tokens + len(ids), docs + len(batch)
    return {"name": name, "tokens": tokens, "documents": docs, "sha256": digest.hexdigest()}


def prepare(cfg: DictConfig) -> Path:
    """Write the shards of cfg.data into data.shards_dir (unless already there); its path."""
    import datasets

    data_cfg = cfg.data
    if not data_cfg.shards_dir:
        raise ConfigError("data.shards_dir is not set: the folder to write the shards into")
    folder = Path(data_cfg.shards_dir).expanduser().resolve()
    by_split, source = inputs(data_cfg)
    tok = load_tokenizer(data_cfg)  # trains/caches the BPE once, before the workers
    if tok.vocab_size > np.iinfo(DTYPE).max + 1:
        raise ConfigError(f"data.vocab_size={tok.vocab_size} does not fit uint16 shards")
    if folder.exists():
        return _check_existing(folder, source, tok)
    hashed = [source["val_fraction"], source["test_fraction"]] if "hash_split" in source else None
    per = int(data_cfg.prepare_files_per_shard)
    tasks = [
        {"split": split, "index": i, "files": files[at : at + per]}
        for split, files in by_split.items()
        for i, at in enumerate(range(0, len(files), per))
    ]
    with atomic_dir(folder) as tmp:  # the shards appear whole or not at all
        plain = OmegaConf.to_container(data_cfg, resolve=True)
        done = datasets.Dataset.from_list(tasks).map(
            write_shard, fn_kwargs={"data_cfg": plain, "out": str(tmp), "hashed": hashed},
            remove_columns=["files"], num_proc=_procs(data_cfg, len(tasks)),
            load_from_cache_file=False, desc="tokenizing",
        )  # fmt: skip
        splits: dict[str, Any] = {}
        for row in sorted(done, key=lambda r: (r["split"], r["index"])):
            entry = splits.setdefault(row["split"], {"tokens": 0, "documents": 0, "files": []})
            entry["files"].append({k: row[k] for k in ("name", "tokens", "documents", "sha256")})
            entry["tokens"] += row["tokens"]
            entry["documents"] += row["documents"]
        manifest = {"format": FORMAT, "dtype": np.dtype(DTYPE).name, "tokenizer": tok.name,
                    "eos_id": tok.eos_id, "vocab_size": tok.vocab_size, "source": source,
                    "splits": splits}  # fmt: skip
        atomic_write_json(tmp / MANIFEST, manifest, indent=1)
    return folder


def _procs(data_cfg: DictConfig, tasks: int) -> int | None:
    procs = min(int(data_cfg.prepare_num_proc), tasks)
    return procs if procs > 1 else None  # None: in this process (no pool to start)


def _check_existing(folder: Path, source: dict[str, Any], tok: Tokenizer) -> Path:
    """A folder that exists was completed by prepare (it renames it last): the same data
    and tokenizer are done already; anything else is refused."""
    if not (folder / MANIFEST).exists():
        raise ConfigError(f"data.shards_dir={folder} exists and has no {MANIFEST}; "
                          "choose a new folder")  # fmt: skip
    manifest = read_manifest(folder)
    if manifest["source"] != source or manifest["tokenizer"] != tok.name:
        raise ConfigError(
            f"data.shards_dir={folder} holds shards of other data or another tokenizer "
            f"({manifest['tokenizer']}); choose a new folder or remove that one"
        )
    return folder


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_cli_choices(argv)
        cfg = compose(*argv)
        start = time.perf_counter()
        folder = prepare(cfg)
    except (ConfigError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    manifest = read_manifest(folder)
    for split, entry in manifest["splits"].items():
        print(f"{split:<10} {entry['tokens']:>15,} tokens  {entry['documents']:>12,} documents  "
              f"{len(entry['files'])} files")  # fmt: skip
    print(f"shards: {folder} ({manifest['tokenizer']}; {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
