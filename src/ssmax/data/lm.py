"""Pretraining data: cached tokenization, packed rows, long held-out sequences (the evals read
these without importing Lightning; the training datamodule is ssmax.data.lm_module)."""

from __future__ import annotations

import hashlib
import itertools
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from ssmax.data.corpus import embedded_sha, is_streaming, load_documents
from ssmax.data.fact_spec import FactSpec, spec_from_cfg
from ssmax.data.facts import FactPlanter
from ssmax.data.packing import (
    chunk_stream,
    encode_stream,
    pack,
    split_chunk,
)
from ssmax.data.tokenizer import Tokenizer

log = logging.getLogger(__name__)
STREAM_SHUFFLE_BUFFER = 10_000  # documents held for the streaming shuffle


def tokenized_split(data_cfg: DictConfig, tokenizer: Tokenizer, split: str):
    """The embedded split tokenized into an "ids" column, cached by datasets.

    The fingerprint is ours (corpus sha + split settings + tokenizer name): the tokenizer object
    itself does not hash stably, which would defeat the cache.
    """
    ds = load_documents(data_cfg, split)
    key = (
        f"{embedded_sha()}|{split}|{data_cfg.val_fraction}|{data_cfg.test_fraction}|"
        f"{tokenizer.name}"
    )
    return ds.map(
        lambda batch: {"ids": tokenizer.encode_batch(batch["text"])},
        batched=True,
        batch_size=64,
        remove_columns=ds.column_names,
        new_fingerprint=hashlib.sha256(key.encode()).hexdigest()[:32],
        desc=f"tokenizing {split}",
    )


def packed_rows(data_cfg: DictConfig, tokenizer: Tokenizer, split: str) -> torch.Tensor:
    """LongTensor [N, T+1] of one embedded split, documents in corpus order."""
    ids = tokenized_split(data_cfg, tokenizer, split)["ids"]
    return pack(ids, tokenizer.eos_id, int(data_cfg.seq_len))


def stream_texts(data_cfg: DictConfig, split: str, seed: int, shuffle: bool):
    """A function (epoch, shard=0, shards=1) -> the document texts of one stream shard of a
    streaming split (seeded buffer shuffle, then datasets' split_dataset_by_node)."""
    from datasets.distributed import split_dataset_by_node

    ds = load_documents(data_cfg, split)
    if shuffle:
        ds = ds.shuffle(seed=seed, buffer_size=STREAM_SHUFFLE_BUFFER)

    def texts(epoch: int, shard: int = 0, shards: int = 1) -> Iterator[str]:
        part = split_dataset_by_node(ds, rank=shard, world_size=shards) if shards > 1 else ds
        part.set_epoch(epoch)
        # .iter(), not iter(): inside a DataLoader worker the latter splits by worker again
        return (text for batch in part.iter(batch_size=64) for text in batch["text"])

    return texts


def test_texts(data_cfg: DictConfig, seed: int = 0, cycle: bool = True) -> Iterator[str]:
    """Test-split documents in a seeded order (e.g. haystack text); passes repeat if cycle."""
    if is_streaming(data_cfg):
        make = stream_texts(data_cfg, "test", seed, shuffle=True)
        for epoch in itertools.count():
            yield from make(epoch)
            if not cycle:
                return
            log.warning("test split exhausted: starting pass %d", epoch + 2)
    docs = list(load_documents(data_cfg, "test")["text"])
    if not docs:
        raise ValueError("the test split is empty: raise data.test_fraction")
    for epoch in itertools.count():
        yield from random.Random(seed * 1_000_003 + epoch).sample(docs, len(docs))
        if not cycle:
            return
        if epoch == 0:
            log.info("test split has %d documents: cycling through it", len(docs))


def test_token_stream(
    data_cfg: DictConfig, tokenizer: Tokenizer, seed: int = 0, cycle: bool = True
) -> Iterator[list[int]]:
    """Token ids of the test documents (same order as test_texts), each followed by EOS."""
    for ids in encode_stream(test_texts(data_cfg, seed, cycle), tokenizer, batch=4):
        yield [*ids, tokenizer.eos_id]


def iter_test_sequences(
    data_cfg: DictConfig, tokenizer: Tokenizer, length: int, seed: int = 0
) -> Iterator[torch.Tensor]:
    """Endless LongTensor[length] windows of the concatenated test documents (doc EOS doc ...)."""
    texts = test_texts(data_cfg, seed, cycle=True)
    return chunk_stream(encode_stream(texts, tokenizer, batch=4), tokenizer.eos_id, length)


def test_sequences(
    data_cfg: DictConfig, tokenizer: Tokenizer, length: int, count: int, seed: int = 0
) -> torch.Tensor:
    """LongTensor [count, length] of held-out test text, deterministic for a seed."""
    seqs = itertools.islice(iter_test_sequences(data_cfg, tokenizer, length, seed), count)
    return torch.stack(list(seqs))


def fact_transform(data_cfg: DictConfig, tokenizer: Tokenizer, seed: int) -> FactTransform | None:
    """Plants data.facts into a share of the rows (None when off): FactTransform."""
    spec = spec_from_cfg(data_cfg.facts)
    if spec.fraction == 0:
        return None
    planter = FactPlanter(spec, tokenizer)
    planter.check_fits(int(data_cfg.seq_len) + 1)
    return FactTransform(spec, planter, seed)


@dataclass(frozen=True)
class FactTransform:
    """A row with data.facts planted. Row k (the sampler's epoch * n + i) draws from its own
    seeded stream: fresh facts each pass, the same on every re-run. Adds "answer" [T]: q at the
    label positions of the q-th asked value, 0 elsewhere. A class, not a closure: a loader
    process started by forkserver or spawn receives the dataset, and so this, pickled."""

    spec: FactSpec
    planter: FactPlanter
    seed: int

    def __call__(self, row: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
        rng = random.Random(f"facts:{self.seed}:{k}")
        answer = torch.zeros(len(row) - 1, dtype=torch.long)
        if rng.random() < self.spec.fraction:
            ids, planted = self.planter.plant(row.tolist(), rng)
            row = torch.tensor(ids, dtype=torch.long)
            asked = [p.answer for p in planted if p.answer is not None]
            for q, (a, b) in enumerate(asked, 1):
                answer[a - 1 : b - 1] = q  # token j is the label of position j - 1
        return split_chunk(row) | {"answer": answer}


def test_fact_sequences(
    data_cfg: DictConfig, tokenizer: Tokenizer, length: int, count: int, seed: int = 0
) -> torch.Tensor:
    """test_sequences with data.facts planted at the training density (facts_per_row per
    data.seq_len tokens), spread over the whole length: a question can sit far past its fact,
    further than anything seen in training. Same prose as test_sequences for the seed."""
    spec = spec_from_cfg(data_cfg.facts)
    planter = FactPlanter(spec, tokenizer)
    n_facts = max(1, round(spec.facts_per_row * length / int(data_cfg.seq_len)))
    prose = test_sequences(data_cfg, tokenizer, length, count, seed)
    rows = [
        planter.plant(row.tolist(), random.Random(f"facts-test:{seed}:{i}"), n_facts)[0]
        for i, row in enumerate(prose)
    ]
    return torch.tensor(rows, dtype=torch.long)


# "test_" here means the held-out split: keep pytest from collecting these when imported.
for _fn in (test_texts, test_token_stream, test_sequences, test_fact_sequences):
    _fn.__test__ = False  # type: ignore[attr-defined]
