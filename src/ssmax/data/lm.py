"""Pretraining data: cached tokenization, packed [B, T] batches, long held-out sequences."""

from __future__ import annotations

import hashlib
import itertools
import logging
import random
from collections.abc import Callable, Iterator

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ssmax.data.corpus import embedded_sha, is_streaming, load_documents
from ssmax.data.facts import FactPlanter, spec_from_cfg
from ssmax.data.module import TokenizedDataModule
from ssmax.data.packing import (
    PackedDataset,
    chunk_stream,
    encode_stream,
    pack,
    split_chunk,
    train_sampler,
)
from ssmax.data.shards import TokenShards
from ssmax.data.stream import START, PackedStream, stream_shards
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


def _stream_texts(data_cfg: DictConfig, split: str, seed: int, shuffle: bool):
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
        make = _stream_texts(data_cfg, "test", seed, shuffle=True)
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


def fact_transform(
    data_cfg: DictConfig, tokenizer: Tokenizer, seed: int
) -> Callable[[torch.Tensor, int], dict[str, torch.Tensor]] | None:
    """Plants data.facts into a share of the rows (None when off). Row k (the sampler's
    epoch * n + i) draws from its own seeded stream: fresh facts each pass, the same on every
    re-run. Adds "answer" [T]: q at the label positions of the q-th asked value, 0 elsewhere."""
    spec = spec_from_cfg(data_cfg.facts)
    if spec.fraction == 0:
        return None
    planter = FactPlanter(spec, tokenizer)
    planter.check_fits(int(data_cfg.seq_len) + 1)

    def transform(row: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
        rng = random.Random(f"facts:{seed}:{k}")
        answer = torch.zeros(len(row) - 1, dtype=torch.long)
        if rng.random() < spec.fraction:
            ids, planted = planter.plant(row.tolist(), rng)
            row = torch.tensor(ids, dtype=torch.long)
            asked = [p.answer for p in planted if p.answer is not None]
            for q, (a, b) in enumerate(asked, 1):
                answer[a - 1 : b - 1] = q  # token j is the label of position j - 1
        return split_chunk(row) | {"answer": answer}

    return transform


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


class LMDataModule(TokenizedDataModule):
    """Packed next-token batches {"input_ids", "labels"}: LongTensor [B, T], T = data.seq_len."""

    def __init__(
        self,
        data_cfg: DictConfig,
        batch_size: int,
        seed: int = 0,
        eval_batch_size: int | None = None,
    ) -> None:
        super().__init__(data_cfg, batch_size, seed)
        self.eval_batch_size = eval_batch_size or batch_size
        self._sets: dict[str, object] = {}
        self._positions: dict[int, list[int]] = {}  # stream shard -> position after its last
        self._resume_positions: list[list[int]] | None = None  # from this run's checkpoint

    def prepare_data(self) -> None:
        """Train/cache the tokenizer and the tokenized splits (rank 0 only under DDP)."""
        if not is_streaming(self.data_cfg) and not self.data_cfg.shards_dir:
            for split in ("train", "validation"):
                tokenized_split(self.data_cfg, self.tokenizer, split)

    def dataset(self, split: str):
        """TokenShards (prepared), PackedDataset (embedded) or PackedStream (streaming) of one
        split, built once."""
        if split not in self._sets:
            cfg, seq_len = self.data_cfg, int(self.data_cfg.seq_len)
            if cfg.shards_dir:
                limit = None if split == "train" else cfg.max_eval_sequences
                plant = fact_transform(cfg, self.tokenizer, self.seed if split == "train" else -1)
                self._sets[split] = TokenShards(
                    cfg.shards_dir, split, seq_len, self.tokenizer, limit, plant
                )
            elif is_streaming(cfg):
                if spec_from_cfg(cfg.facts).fraction > 0:
                    raise ValueError(
                        "data.facts.fraction > 0 plants facts in indexed rows (the embedded "
                        "corpus or data.shards_dir), not in a stream: set it to 0 or prepare "
                        "shards (python -m ssmax.data.prepare)"
                    )
                train = split == "train"
                limit = None if train else cfg.max_eval_sequences
                texts = _stream_texts(cfg, split, self.seed, shuffle=train)
                self._sets[split] = PackedStream(texts, self.tokenizer, seq_len, limit, train)
            else:
                rows = packed_rows(cfg, self.tokenizer, split)
                limit = None if split == "train" else cfg.max_eval_sequences
                # validation plants too (its own seed): val loss is on the training language
                plant = fact_transform(cfg, self.tokenizer, self.seed if split == "train" else -1)
                self._sets[split] = PackedDataset(rows[:limit] if limit else rows, plant)
        return self._sets[split]

    def setup(self, stage: str | None = None) -> None:
        if stage in (None, "fit"):
            self.dataset("train")
        self.dataset("validation")

    def _loader(self, split: str, batch_size: int) -> DataLoader:
        ds = self.dataset(split)
        sampler = None
        workers = int(self.data_cfg.num_workers)
        rank, world = self.ranks()
        if split == "train" and isinstance(ds, PackedStream):
            taken = self.start_batches + self.batches_done
            ds.place(rank, world, workers, self.stream_start(), taken)
        elif isinstance(ds, PackedStream):  # every rank validates on the same rows
            ds.place(0, 1, workers)
        elif split == "train":
            done = self.start_batches + self.batches_done
            sampler = train_sampler(len(ds), self.seed, batch_size, done, True, rank, world,
                                    self.trainer.current_epoch if self.trainer else 0)  # fmt: skip
        return DataLoader(
            ds,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=split == "train",  # fixed [B, T] for every training step
            num_workers=workers,
            persistent_workers=workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.batch_size)

    # ---- where the stream stands: the positions ride along the rows (ssmax.data.stream)

    def on_before_batch_transfer(self, batch: dict, dataloader_idx: int) -> dict:
        """Keep the position of the last training row of each stream shard; the model gets
        input_ids and labels only."""
        if isinstance(batch, dict) and "position" in batch:
            shard, position = batch.pop("shard"), batch.pop("position")
            if self.trainer is not None and self.trainer.training:
                self._positions[int(shard[-1])] = position[-1].tolist()
        return batch

    def stream_start(self) -> list[list[int]] | None:
        """Where each shard of the training stream starts: this run's checkpoint, else the
        run it continues ((f) from (a)'s switch point), else the beginning (None)."""
        return self._resume_positions or self.start_state.get("stream_positions")

    def state_dict(self) -> dict[str, object]:
        """Saved in every checkpoint: the training stream's position per shard, gathered from
        all ranks (Lightning calls this on every rank when it saves)."""
        if not isinstance(self._sets.get("train"), PackedStream) or self.trainer is None:
            return {}
        rank, world = self.ranks()
        workers = max(int(self.data_cfg.num_workers), 1)
        start = self.stream_start() or [START] * stream_shards(world, workers)
        shards = range(rank * workers, (rank + 1) * workers)
        local = torch.tensor([self._positions.get(s, list(start[s])) for s in shards])
        if world > 1:
            strategy = self.trainer.strategy
            local = strategy.all_gather(local.to(strategy.root_device)).cpu()
        return {"stream_positions": local.reshape(-1, 3).tolist()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self._resume_positions = state.get("stream_positions")  # type: ignore[assignment]

    def val_dataloader(self) -> DataLoader:
        return self._loader("validation", self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size)


# "test_" here means the held-out split: keep pytest from collecting these when imported.
for _fn in (test_texts, test_token_stream, test_sequences, test_fact_sequences):
    _fn.__test__ = False  # type: ignore[attr-defined]
