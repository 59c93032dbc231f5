"""The Lightning datamodule of pretraining, over the rows, shards and streams of ssmax.data.lm,
and what SFT's (ssmax.data.sft_module) shares with it. Only training imports these modules:
Lightning takes seconds to import, and the evals, which read lm and sft, need none of it. Each
training stage imports its own: a change to SFT's data reruns no pretraining (the stage's code
is what its imports reach, ssmax.pipeline.stage_code)."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ssmax.data.corpus import is_streaming
from ssmax.data.fact_spec import spec_from_cfg
from ssmax.data.lm import fact_transform, packed_rows, stream_texts, tokenized_split
from ssmax.data.packing import PackedDataset, train_sampler
from ssmax.data.shards import TokenShards
from ssmax.data.sizes import check_rows
from ssmax.data.stream import START, PackedStream, stream_shards
from ssmax.data.tokenizer import Tokenizer, load_tokenizer


class TokenizedDataModule(L.LightningDataModule):
    """What the pretraining and SFT datamodules share: config, lazy tokenizer, resume position."""

    def __init__(self, data_cfg: DictConfig, batch_size: int, seed: int = 0) -> None:
        super().__init__()
        self.data_cfg, self.batch_size, self.seed = data_cfg, batch_size, seed
        self._tokenizer: Tokenizer | None = None
        self.batches_done = 0  # set on resume: training batches already seen
        self.start_batches = 0  # batches of this rank before this run's first ((f): (a)'s)
        self.start_state: dict[str, Any] = {}

    def resume_at(self, batches_done: int) -> None:
        """Called from the checkpoint, before the training dataloader is built."""
        self.batches_done = batches_done

    def start_from(self, state: dict[str, Any]) -> None:
        """Begin the data where another run's stood: its data_state() at some step (for (f),
        (a)'s at the switch point), so that this run trains on what that one would have next."""
        self.start_state = dict(state)
        self.start_batches = int(state["batches_done"])

    def setup(self, stage: str | None = None) -> None:
        """Build the splits a stage reads (each subclass's ``dataset(split)``, built once)."""
        if stage in (None, "fit"):
            self.dataset("train")
        self.dataset("validation")

    def ranks(self) -> tuple[int, int]:
        """(global rank, number of ranks) of the attached trainer; (0, 1) without one."""
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.data_cfg)
        return self._tokenizer


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
                texts = stream_texts(cfg, split, self.seed, shuffle=train)
                self._sets[split] = PackedStream(texts, self.tokenizer, seq_len, limit, train)
            else:
                rows = packed_rows(cfg, self.tokenizer, split)
                limit = None if split == "train" else cfg.max_eval_sequences
                # validation plants too (its own seed): val loss is on the training language
                plant = fact_transform(cfg, self.tokenizer, self.seed if split == "train" else -1)
                self._sets[split] = PackedDataset(rows[:limit] if limit else rows, plant)
            self._check_rows(split)
        return self._sets[split]

    def _check_rows(self, split: str) -> None:
        """A training split with a whole batch for every device, a validation split with a
        sequence (ConfigError, one line: ssmax.data.sizes); a stream is not counted."""
        ds, seq_len = self._sets[split], int(self.data_cfg.seq_len)
        if split not in ("train", "validation") or isinstance(ds, PackedStream):
            return
        _, world = self.ranks()
        need = self.batch_size * world if split == "train" else 1
        if len(ds) >= need:
            return
        if isinstance(ds, TokenShards):
            tokens, where = ds.starts[-1], f"data.shards_dir={self.data_cfg.shards_dir}"
        else:
            ids = tokenized_split(self.data_cfg, self.tokenizer, split)["ids"]
            tokens, where = sum(len(doc) + 1 for doc in ids), "the embedded corpus"
        devices = f"{world} devices" if world > 1 else "1 device"
        per = f"trainer.pretrain.batch_size={self.batch_size} on {devices}"
        check_rows(split, tokens, seq_len, need, where, per)

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


def lm_datamodule(cfg: DictConfig, batch_size: int, compiled: bool) -> LMDataModule:
    """Pretraining's datamodule for ssmax.lit.trainer.train (compiled: no say in its shapes)."""
    return LMDataModule(cfg.data, batch_size=batch_size, seed=cfg.seed)
